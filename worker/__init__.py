"""Runs on every host: the agent (``python -m worker.agent``) and the training-script helpers.

Importing this package never imports TensorFlow and never imports ``launcher``.
"""

from worker.context import TaskContext, context
from worker.reporting import report

__all__ = ["TaskContext", "context", "report"]
