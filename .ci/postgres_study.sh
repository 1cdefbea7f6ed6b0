#!/usr/bin/env bash
# CI: two 'spectune recommend' workers share one Optuna study on a real PostgreSQL server.
# Asserts: trials in the study = the sum of both workers' trials, no duplicated trial numbers (0..N-1), the
# password never printed, and the study opens in optuna-dashboard. Run from the repository root, as root.
set -euo pipefail
WORK="$(mktemp -d)"
PW="ci-$(date +%s)-secret"
DB=spectune_ci
URL="postgresql://spectune:${PW}@127.0.0.1:5432/${DB}"          # what users type (spectune picks the driver)
URL_PG2="postgresql+psycopg2://spectune:${PW}@127.0.0.1:5432/${DB}"  # for plain optuna / optuna-dashboard

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
VER="$(ls /etc/postgresql | sort -n | tail -1)"
pg_ctlcluster "$VER" main start 2>/dev/null || pg_ctlcluster "$VER" main status >/dev/null
for i in $(seq 1 30); do su postgres -c "pg_isready -q" && break; sleep 1; done
su postgres -c "psql -q -v ON_ERROR_STOP=1" <<SQL
DROP DATABASE IF EXISTS ${DB};
DROP ROLE IF EXISTS spectune;
CREATE ROLE spectune LOGIN PASSWORD '${PW}';
CREATE DATABASE ${DB} OWNER spectune;
SQL
pip install -q -e ".[postgres,dashboard]"

# a small synthetic profile (the search needs no model weights; tests/tune/tune_synth.py builds it)
python - "$WORK/profile" <<'PY'
import sys
sys.path.insert(0, "tests/tune")
from tune_synth import make_profile
make_profile(models=("a", "b", "c"), combine="we:0.2,0.3,0.5", temperature=0.0).save(sys.argv[1])
PY

run_worker() {  # $1 = trials, $2 = seed, $3 = log
  spectune recommend --models a,b,c --combine we:0.2,0.3,0.5 --profile "$WORK/profile" --trials "$1" \
    --seed "$2" --storage "$URL" --study-name ci-shared --out "$WORK/out$2" >"$3.out" 2>"$3.err"
}
run_worker 400 1 "$WORK/w1" & P1=$!
run_worker 300 2 "$WORK/w2" & P2=$!
wait $P1 || { cat "$WORK/w1.err"; echo "FAIL: worker 1"; exit 1; }
wait $P2 || { cat "$WORK/w2.err"; echo "FAIL: worker 2"; exit 1; }
N1="$(grep -oE '^[0-9]+ trials in' "$WORK/w1.err" | grep -oE '^[0-9]+')"
N2="$(grep -oE '^[0-9]+ trials in' "$WORK/w2.err" | grep -oE '^[0-9]+')"
if grep -q "$PW" "$WORK"/w*.out "$WORK"/w*.err; then echo "FAIL: the storage password was printed"; exit 1; fi
grep -q "postgresql.*://spectune:\*\*\*@" "$WORK/w1.err" || { echo "FAIL: masked URL not shown"; exit 1; }

python - "$URL_PG2" "$N1" "$N2" <<'PY'
import sys, optuna
url, n1, n2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
numbers = [t.number for t in optuna.load_study(study_name="ci-shared", storage=url).trials]
print(f"postgres study: worker 1 added {n1}, worker 2 added {n2}, study holds {len(numbers)} trials")
assert n1 == 400 and n2 == 300, (n1, n2)
assert len(numbers) == n1 + n2, f"lost or extra trials: {len(numbers)} != {n1 + n2}"
assert len(set(numbers)) == len(numbers), "duplicated trial numbers"
assert sorted(numbers) == list(range(len(numbers))), "trial numbers are not 0..N-1"
PY

# the study opens in optuna-dashboard
optuna-dashboard "$URL_PG2" --host 127.0.0.1 --port 18089 >"$WORK/dash.log" 2>&1 & DASH=$!
ok=0
for i in $(seq 1 30); do
  if curl -sf http://127.0.0.1:18089/api/studies 2>/dev/null | grep -q '"ci-shared"'; then ok=1; break; fi
  sleep 1
done
kill "$DASH" 2>/dev/null || true
[ "$ok" = 1 ] || { cat "$WORK/dash.log"; echo "FAIL: optuna-dashboard did not list the study"; exit 1; }
echo "postgres shared study: OK (optuna-dashboard lists it)"
rm -rf "$WORK"
