"""The documentation's reference, generated from the code (docs/hooks/reference.py puts it in the
site): the spec's fields from its pydantic model, every CLI verb and flag from the argparse
parser, the env vars of :mod:`worker.wire.env`, the event types of :mod:`launcher.run.events`
and the exit codes. Nothing here is written twice: a field, flag or event the code gains is in
the next build of the docs. :func:`launcher.reference.pages.reference_pages` is the entry point.
"""
