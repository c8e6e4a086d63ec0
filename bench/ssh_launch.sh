#!/usr/bin/env bash
# `dtrun -H` through a real OpenSSH (client and server on loopback, a throwaway key): a 2-host job
# (127.0.0.1 and localhost, one worker each) launched to exit, against the same two nodes started
# directly (two dtruns, no ssh); then Ctrl-C to the launcher, and kill -9 of the launcher, each timed
# until every process of the job is gone. Needs root (sshd) and openssh-server (apt-get install
# openssh-server); nothing is left running or installed for the user.
#   bench/ssh_launch.sh [BUILD_DIR]      (hyperfine for the launch rows)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "${1:-$here/../build}")
dtrun=$build/bin/dtrun
[ -x /usr/sbin/sshd ] || { echo "needs openssh-server (/usr/sbin/sshd)" >&2; exit 1; }
dir=$(mktemp -d)
trap '[ -f "$dir/sshd.pid" ] && kill "$(cat "$dir/sshd.pid")" 2>/dev/null; sed -i "\|dtrun-ssh-bench|d" ~/.ssh/authorized_keys; rm -rf "$dir"' EXIT
ssh-keygen -q -t ed25519 -N "" -C dtrun-ssh-bench -f "$dir/key"
ssh-keygen -q -t ed25519 -N "" -f "$dir/hostkey"
mkdir -p ~/.ssh /run/sshd && cat "$dir/key.pub" >> ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys
printf 'Port 2222\nListenAddress 127.0.0.1\nHostKey %s\nPidFile %s\nPasswordAuthentication no\n' \
  "$dir/hostkey" "$dir/sshd.pid" > "$dir/sshd_config"
/usr/sbin/sshd -f "$dir/sshd_config"
ssh_cmd="ssh -p 2222 -i $dir/key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"
export OMP_NUM_THREADS=1 PYTHON_EXEC=/usr/bin/python3
conf="--rdzv-conf keep_alive_interval=0.5,last_call_timeout=0"
printf '#!/bin/sh\necho "READY $RANK"\nexec sleep 300\n' > "$dir/idle.sh"; chmod +x "$dir/idle.sh"

echo "## launch-to-exit, 2 hosts x 1 no-op worker (hyperfine, mean ± σ)"
hyperfine -N --warmup 2 --runs 20 -n "ssh HOST true alone" "$ssh_cmd 127.0.0.1 true" | grep -E "Time" | head -1
hyperfine -N --warmup 2 --runs 20 -n "dtrun -H (ssh)" \
  "$dtrun -H 127.0.0.1:1,localhost:1 --ssh-command '$ssh_cmd' $conf --no-python /bin/true" | grep -E "Time" | head -1
hyperfine --warmup 2 --runs 20 -n "two dtruns, no ssh" \
  "$dtrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29411 --rdzv-id b --rdzv-conf is_host=1 --no-python /bin/true & \
   $dtrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29411 --rdzv-id b --rdzv-conf is_host=0 --no-python /bin/true; wait" \
  | grep -E "Time" | head -1

# Starts the job, waits for both workers, sends `signal` to the launcher, and prints how long until
# no process of the job is left.
stop_with() {
  local signal=$1 log=$dir/$1.log
  "$dtrun" -H 127.0.0.1:1,localhost:1 --ssh-command "$ssh_cmd" -x BENCH_MARK=$dir --no-python "$dir/idle.sh" \
    >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do grep -q "READY 0" "$log" && grep -q "READY 1" "$log" && break; sleep 0.05; done
  local start end
  start=$(date +%s.%N)
  kill -"$signal" "$pid"
  while grep -lz "BENCH_MARK=$dir" /proc/[0-9]*/environ >/dev/null 2>&1; do sleep 0.005; done
  end=$(date +%s.%N)
  wait "$pid" 2>/dev/null || true
  echo "kill -$signal of the launcher -> no process of the job left: $(echo "($end - $start) * 1000" | bc | cut -d. -f1) ms"
}
echo "## stopping (OpenSSH $(ssh -V 2>&1 | cut -d, -f1), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
for i in 1 2 3; do stop_with INT; done
for i in 1 2 3; do stop_with KILL; done

# Input through ssh to the rank that prompts: rank 1 (the second host) prints a prompt stamped with
# the time it printed it and reads a line. Timed: the prompt's time to the launcher's console (the
# quiet times, 100 ms on the host and 20 ms at the launcher, are most of it), and a line written to the launcher's stdin to
# the worker's answer.
cat > "$dir/ask.sh" <<'ASK'
#!/bin/sh
[ "$RANK" = 1 ] || exit 0
printf "name@%s? " "$(date +%s.%N)"
read name
echo "hello $name"
ASK
chmod +x "$dir/ask.sh"
echo "## input through ssh (a prompt on the second host, answered from the launcher's stdin)"
for i in 1 2 3; do
  /usr/bin/python3 - "$dtrun" "$ssh_cmd" "$dir/ask.sh" <<'PY'
import os, subprocess, sys, time
dtrun, ssh_cmd, ask = sys.argv[1:]
p = subprocess.Popen([dtrun, "-H", "127.0.0.1:1,localhost:1", "--ssh-command", ssh_cmd, "--no-python", ask],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
out = b""
def until(needle):
    global out
    while needle not in out:
        chunk = os.read(p.stdout.fileno(), 4096)
        if not chunk:
            sys.exit(f"dtrun ended before {needle!r}: {out!r}")
        out += chunk
    return time.time()
shown = until(b"? ")
printed = float(out.split(b"name@")[1].split(b"?")[0])
sent = time.time()
p.stdin.write(b"bench\n")
p.stdin.flush()
answered = until(b"hello bench")
p.stdin.close()
p.wait(timeout=60)
print(f"prompt printed -> on the launcher's console: {(shown - printed) * 1000:.0f} ms; "
      f"line written -> the worker's answer back: {(answered - sent) * 1000:.0f} ms")
PY
done
