"""What an operator does to sagas: cancel one, or cancel every saga a filter matches (a bulk
compensation) after a recorded dry run, with its progress stored in the read side. The
dry run's design note: :mod:`services.operator.plans`; the execution's:
:mod:`services.operator.actions`."""
