"""The saga console: a few server-rendered HTML pages for the people who run Sagaline.

``routes`` serves them under ``/console``, ``session`` says who is logged in (an API key
in an HttpOnly cookie) and guards the forms against cross-site requests, ``data`` gathers
what the pages show from the read models, the broker and ``services.deadletters``, and
``templates/`` holds the Jinja2 templates (autoescaped) and the style sheet.
"""
