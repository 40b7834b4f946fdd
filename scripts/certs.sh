#!/usr/bin/env bash
# A throw-away certificate authority for the secured local stack (scripts/services.sh up --secure).
#
#   scripts/certs.sh <dir>
#
# writes, once (an existing <dir>/ca.crt is kept):
#   ca.crt, ca.key          the CA every service and client trusts
#   server.crt, server.key  one server certificate for Kafka, MariaDB and Temporal;
#                           subjectAltName DNS:localhost, IP:127.0.0.1, DNS:onceflow-services
#   client.crt, client.key  the pipeline's client certificate (CN=onceflow), for Temporal mTLS
#   other-ca.crt            a second, unrelated CA (negative tests: an untrusted server)
# Keys are unencrypted PKCS#8 PEM, readable by the owner only.
set -euo pipefail
dir=${1:?usage: scripts/certs.sh <dir>}
mkdir -p "$dir"
cd "$dir"
[[ -f ca.crt && -f client.key ]] && exit 0
umask 077
days=3650
ossl() { openssl "$@" 2>/dev/null; }

ossl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days $days -subj '/CN=onceflow local CA'
ossl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.crt -days $days -subj '/CN=an unrelated CA'

sign() { # name subject extensions
  ossl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2"
  printf '%s\n' "$3" >"$1.ext"
  ossl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days $days -extfile "$1.ext"
  rm -f "$1.csr" "$1.ext"
}
sign server '/CN=localhost' "subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:onceflow-services
extendedKeyUsage=serverAuth,clientAuth"
sign client '/CN=onceflow' 'extendedKeyUsage=clientAuth'
chmod 600 ./*.key
chmod 644 ./*.crt
