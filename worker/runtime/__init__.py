"""What runs inside each task before the user's code: the cold start
(``python -m worker.runtime.bootstrap``), the warm spare's wait (``python -m worker.runtime.spare``),
both becoming the task through :mod:`worker.runtime.task_entry`, and a drill's injected crash
(:mod:`worker.runtime.crash`). It imports only the wire and the training API, never the agent.
"""
