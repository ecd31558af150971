"""The chief's files as the coordinator reaches them: the checkpoints it lists (``checkpoints``),
the lock on the checkpoint directory (``lock``: ``flock`` here, ``remote_lock`` over SFTP), and how
an engine opens both on the chief's host (``access``). Knows nothing of plans' making, jobs or
engines."""
