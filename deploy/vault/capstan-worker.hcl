# Policy of the Capstan workers' AppRole (deploy/vault/setup.sh).
#
# A secret ref a/b/c is read from KV v2 <mount>/data/<prefix>/a/b, field c
# (CAPSTAN_VAULT_MOUNT=secret, CAPSTAN_VAULT_PREFIX=capstan by default).
# Workers only read: they never write, list or delete secrets.
path "secret/data/capstan/*" {
  capabilities = ["read"]
}

# Keep the worker's own token alive.
path "auth/token/renew-self" {
  capabilities = ["update"]
}

path "auth/token/lookup-self" {
  capabilities = ["read"]
}
