"""What the launcher and the worker share: the agent protocol, the environment variables, the
TF_CONFIG model, the task reports and the versions. ``launcher`` imports nothing else of
``worker``."""
