#!/bin/sh
# Run by scripts/test-deb.sh inside the clean root, as an ordinary user would use the packages:
#   in_root.sh launcher    after `apt install ./dtrun_*.deb` alone
#   in_root.sh trainers    after `apt install ./dtrun-trainers_*.deb` too
# Any failure fails the test.
set -eu
fail() { echo "in-root: FAILED: $*" >&2; exit 1; }
id tester >/dev/null 2>&1 || useradd -m tester
as_user() { runuser -u tester -- "$@"; }
cd /tmp

launcher() {
  as_user dtrun --version | tee /tmp/version
  grep -q '^dtrun [0-9.]* (commit ' /tmp/version || fail "dtrun --version: no version and commit"
  grep -q 'LibTorch' /tmp/version || fail "dtrun --version: no LibTorch line"
  # The launcher alone brings no LibTorch (a node's Python scripts bring their own PyTorch).
  if dpkg -l 'libtorch*' 2>/dev/null | grep -q '^ii'; then fail "installing dtrun installed LibTorch"; fi
  echo "in-root: dtrun alone: $(dpkg -l | grep -c '^ii') packages installed, no LibTorch"

  # Python workers import the packaged module (dtrun puts it on their path; python3 finds it itself).
  cat > /tmp/hello.py <<'PY'
import os
import dtrun
print("python rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], "module", dtrun.__file__)
PY
  as_user dtrun --standalone --nproc-per-node 2 /tmp/hello.py > /tmp/hello.log 2>&1 || { cat /tmp/hello.log; fail "Python job"; }
  [ "$(grep -c 'module /usr/lib/dtrun/python/dtrun/__init__.py' /tmp/hello.log)" = 2 ] ||
    { cat /tmp/hello.log; fail "Python workers did not import the packaged module"; }
  python3 -c 'import dtrun' || fail "Debian's python3 does not find the dtrun module"

  # Two nodes on this machine: the rendezvous goes through the packaged gRPC module.
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  node() {
    as_user dtrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$port \
      --rdzv-id pkg --no-python sh -c 'echo "node rank $GROUP_RANK: rank $RANK of $WORLD_SIZE"'
  }
  node > /tmp/node0.log 2>&1 & n0=$!
  node > /tmp/node1.log 2>&1 & n1=$!
  wait $n0 || { cat /tmp/node0.log; fail "2-node job, first agent"; }
  wait $n1 || { cat /tmp/node1.log; fail "2-node job, second agent"; }
  cat /tmp/node0.log /tmp/node1.log | grep -c 'of 2$' | grep -qx 2 || { cat /tmp/node*.log; fail "2-node job: not 2 ranks"; }

  # Completion and the man page where bash and man look for them.
  bash -c '. /usr/share/bash-completion/completions/dtrun; complete -p dtrun' | grep -q _dtrun || fail "bash completion"
  [ -s /usr/share/zsh/vendor-completions/_dtrun ] || fail "zsh completion"
  [ -s /usr/share/man/man1/dtrun.1.gz ] || fail "no man page for dtrun"
  echo "in-root: dtrun alone: Python job, 2-node job, completion and man page pass"
}

trainers() {
  for p in dtdata train_imagenet train_recsys; do as_user $p --version >/dev/null || fail "$p --version"; done
  # The 2-process job: the packaged trainer on a tiny dataset from the packaged tool.
  as_user dtdata make-demo /tmp/data --classes 4 --train-per-class 16 --val-per-class 4 --size 32 >/dev/null
  as_user dtrun --standalone --nproc-per-node 2 train_imagenet /tmp/data --epochs 1 -b 8 --lr 0.02 --image-size 32 -j 1 \
    --output-dir /tmp/run > /tmp/train.log 2>&1 || { tail -20 /tmp/train.log; fail "2-process train_imagenet"; }
  grep -q 'best val top1' /tmp/train.log || { tail -20 /tmp/train.log; fail "train_imagenet printed no result"; }
  for p in dtdata dtplot train_imagenet train_recsys; do
    [ -s /usr/share/man/man1/$p.1.gz ] || fail "no man page for $p"
  done
  echo "in-root: with dtrun-trainers ($(dpkg -l | grep -c '^ii') packages): 2-process train_imagenet under dtrun:" \
    "$(grep -o 'best val top1 [0-9.]*%' /tmp/train.log)"
}

case "${1:-}" in
  launcher) launcher ;;
  trainers) trainers ;;
  *) fail "usage: in_root.sh launcher|trainers" ;;
esac
