#!/bin/sh
# Start of a tfcluster worker container, then CMD (sshd -D -e):
#  - the public key(s) mounted at /etc/tfcluster/authorized_keys become user tfc's authorized keys,
#    copied to a root-owned 0644 file as sshd's StrictModes wants (a bind-mounted file keeps the
#    owner and mode it has on the Docker host, which sshd may refuse);
#  - on first start the container makes its own ed25519 host key, kept in the volume mounted at
#    /etc/ssh/host_keys so that re-creating the container keeps it; its fingerprint is logged
#    (docker compose logs) so that it can be checked before it is trusted.
# The TFC_* variables move the files elsewhere; they exist for the tests only.
set -eu

mounted="${TFC_MOUNTED_KEYS:-/etc/tfcluster/authorized_keys}"
authorized="${TFC_AUTHORIZED_KEYS:-/etc/ssh/authorized_keys/tfc}"
host_key="${TFC_HOST_KEY:-/etc/ssh/host_keys/ssh_host_ed25519_key}"

if [ ! -f "$mounted" ] || [ ! -s "$mounted" ]; then
    echo "tfcluster-entrypoint: no public key at $mounted: mount one there (docker/compose.yaml" \
         "mounts docker/keys/id_ed25519.pub; see docker/README.md)" >&2
    exit 1
fi
install -o root -g root -m 0644 "$mounted" "$authorized"

if [ ! -s "$host_key" ]; then
    rm -f "$host_key" "$host_key.pub"
    ssh-keygen -q -t ed25519 -N '' -C "tfcluster@$(hostname)" -f "$host_key"
fi
echo "tfcluster-entrypoint: host key $(ssh-keygen -l -E sha256 -f "$host_key.pub")" >&2

exec "$@"
