#!/usr/bin/env bash
# Runs the backup module's bucket and backup tests against versitygw (an
# S3 gateway; posix backend, 127.0.0.1) as well as the in-process servers
# `make test` uses. Needs versitygw on PATH or in $(go env GOPATH)/bin:
#   go install github.com/versity/versitygw/cmd/versitygw@latest
# Extra arguments go to go test (default: -race -run the S3-relevant tests).
set -euo pipefail
cd "$(dirname "$0")/.."
VGW="$(command -v versitygw || true)"
if [ -z "$VGW" ] && [ -x "$(go env GOPATH)/bin/versitygw" ]; then
  VGW="$(go env GOPATH)/bin/versitygw"
fi
if [ -z "$VGW" ]; then
  echo "versitygw is not installed; skipping (go install github.com/versity/versitygw/cmd/versitygw@latest)" >&2
  exit 0
fi
root="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 17070)"
mkdir -p "$root/gw/segkv-backup-test"
export AWS_ACCESS_KEY_ID=segkvtest AWS_SECRET_ACCESS_KEY=segkvtestsecret
"$VGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port "127.0.0.1:$port" \
  posix "$root/gw" >"$root/vgw.log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$root"; }
trap cleanup EXIT
for _ in $(seq 50); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  sleep 0.1
done
export SEGKV_BACKUP_S3_URL="s3://segkv-backup-test?region=us-east-1&use_path_style=true&endpoint=http://127.0.0.1:$port"
echo "versitygw on 127.0.0.1:$port ($("$VGW" --version 2>/dev/null | head -1))"
cd backup
if [ $# -eq 0 ]; then
  set -- -race -count=1 -run 'Conformance|RestoreEverySeq|TwoLoops' -v
fi
go test "$@" ./...
