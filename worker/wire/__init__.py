"""What the launcher and the worker share, each side importing the same code so they cannot
disagree: the agent protocol (``protocol``) and its version check (``version``, ``handshake``),
the environment variables (``env``), the TF_CONFIG model (``tfconfig``), the report lines a task
sends its agent (``reports``), the signals a task is sent (``signals``), the process table an
agent keeps and the coordinator reads after its death (``process_table``, ``process_identity``),
how tfcluster's own modules are started (``module_start``), and how both sides open files in
directories others may write (``safe_open``). ``launcher`` imports nothing
else of ``worker``; nothing here imports the rest of ``worker``."""
