#!/bin/sh
# Configures the dev-mode Vault of docker-compose.yml for Capstan: the
# AppRole auth method, the capstan-worker policy, a role with fixed dev
# credentials, and sample secrets. Runs in the hashicorp/vault image with
# VAULT_ADDR and VAULT_TOKEN (the dev root token) set. Dev only: the role id
# and secret id come from the compose file, never do this in production.
set -eu

i=0
until vault status >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -gt 60 ]; then
    echo "vault did not come up at $VAULT_ADDR" >&2
    exit 1
  fi
  sleep 1
done

vault auth list -format=json | grep -q '"approle/"' || vault auth enable approle
vault policy write capstan-worker /deploy/vault/capstan-worker.hcl
vault write auth/approle/role/capstan-worker \
  token_policies=capstan-worker token_ttl=1h token_max_ttl=24h secret_id_ttl=0
vault write auth/approle/role/capstan-worker/role-id role_id="$CAPSTAN_VAULT_ROLE_ID"
vault write auth/approle/role/capstan-worker/custom-secret-id secret_id="$CAPSTAN_VAULT_SECRET_ID" >/dev/null

# Sample secrets: ref providers/github/token -> secret/data/capstan/providers/github, field token.
vault kv put secret/capstan/providers/github token=ghp_example_not_a_real_token
vault kv put secret/capstan/providers/openweather api_key=example-not-a-real-key
echo "vault configured for capstan"
