"""SSH transport: config, connect, auth, known_hosts, errors, SFTP. Knows nothing of plans or
backends."""
