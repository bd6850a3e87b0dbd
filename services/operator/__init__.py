"""What an operator does to sagas: cancel one, or cancel a filtered set (a bulk
compensation) after a dry run; each action recorded in the read side with its progress.
The design note is docs in README's "The console" section and :mod:`services.operator.plans`."""
