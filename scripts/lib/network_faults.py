#!/usr/bin/env python3
"""The load and the checks of scripts/network-faults.sh (which starts everything and passes it here).

Load, all through real HTTP on loopback: unique sessions-revoked SETs at a steady pace (40/s, 8 senders),
retried like Google (on 503 and connection errors, until acknowledged); sign-ins (2 callers, every 0.5 s);
session checks (4 callers, every 0.2 s); admin stats (every 1 s); /readyz (every 0.25 s). Each answer is
recorded with its start and end. Faults are switched through the proxy's control port. At the end the database
(the promoted standby, after the failover) is checked against what was acknowledged.
"""
import argparse
import base64
import json
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

FAULTS = [("blackhole", 20), ("reset", 10), ("vanish", 20), ("failover", 0)]
CALM = 6  # seconds of normal service before each fault
RECOVERY_LIMIT = 30.0
SET_RATE = 40  # SETs per second offered


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.records = []  # (kind, started, ended, status)
        self.acknowledged = set()

    def add(self, kind, started, ended, status):
        with self.lock:
            self.records.append((kind, started, ended, status))


def http(method, url, body=None, headers=None, timeout=30):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as error:
        return f"error:{type(getattr(error, 'reason', error)).__name__}", b""


def jti(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"]


def control(port, *command):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall((" ".join(command) + "\n").encode())
        answer = connection.makefile().readline().strip()
    if not answer.startswith("ok"):
        raise SystemExit(f"network-faults: the proxy refused {command}: {answer}")


def main():
    parser = argparse.ArgumentParser()
    for name in ["receiver", "transmitter", "admin-token", "psql", "stop-primary", "promote-standby"]:
        parser.add_argument("--" + name, required=True)
    for name in ["control-port", "primary-port", "standby-port"]:
        parser.add_argument("--" + name, type=int, required=True)
    parser.add_argument("--database-timeout", type=float, default=5)
    args = parser.parse_args()
    rx, tx = args.receiver, args.transmitter
    bound = args.database_timeout + 1.0
    database_port = args.primary_port

    def psql(sql):
        command = args.psql.split() + ["-p", str(database_port), "-c", sql]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()

    # About as many as the faults take to inject (a quick recovery each); the rest are sent after them.
    count = int(SET_RATE * (sum(CALM + length + 5 for _, length in FAULTS) + 10))
    print(f"network-faults: signing {count} SETs", file=sys.stderr)
    status, body = http("POST", tx + "/dev/sign-batch", json.dumps({"type": "sessions-revoked", "count": count, "first": 0}).encode(),
                        {"Content-Type": "application/json"}, timeout=600)
    assert status == 200, status
    tokens = [line for line in body.decode().split("\n") if line]
    status, body = http("POST", tx + "/dev/idtoken", json.dumps({"sub": "netfault-signin"}).encode(), {"Content-Type": "application/json"})
    id_token = json.loads(body)["id_token"]
    # The session checked belongs to a user of its own: the sign-in load replays one ID token all along, and a user
    # keeps at most RISC_MAX_SESSIONS_PER_USER live sessions (the oldest end).
    status, body = http("POST", tx + "/dev/idtoken", json.dumps({"sub": "netfault-session"}).encode(), {"Content-Type": "application/json"})
    session_id_token = json.loads(body)["id_token"]
    status, body = http("POST", rx + "/tokensignin", f"idtoken={session_id_token}".encode(),
                        {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200, (status, body)
    session = json.loads(body)["session_token"]

    recorder = Recorder()
    stop = threading.Event()
    todo = queue.Queue()
    for token in tokens:
        todo.put(token)

    def sender():
        while not stop.is_set():
            try:
                token = todo.get(timeout=0.5)
            except queue.Empty:
                continue
            started = time.monotonic()
            status, _ = http("POST", rx + "/risc/events", token.encode(),
                             {"Content-Type": "application/secevent+jwt", "Accept": "application/json"})
            ended = time.monotonic()
            recorder.add("set", started, ended, status)
            if status == 202:
                with recorder.lock:
                    recorder.acknowledged.add(jti(token))
            elif status == 503 or str(status).startswith("error:"):
                time.sleep(1)  # Google retries later
                todo.put(token)
            else:
                recorder.add("set-refused", started, ended, status)

    def paced(kind, interval, call):
        def loop():
            while not stop.is_set():
                started = time.monotonic()
                status = call()
                ended = time.monotonic()
                recorder.add(kind, started, ended, status)
                time.sleep(max(0, interval - (ended - started)))
        return loop

    sign_in = lambda: http("POST", rx + "/tokensignin", f"idtoken={id_token}".encode(),
                           {"Content-Type": "application/x-www-form-urlencoded"})[0]
    check = lambda: http("GET", rx + "/v1/session", headers={"Authorization": f"Bearer {session}"})[0]
    stats = lambda: http("GET", rx + "/admin/v1/stats", headers={"Authorization": f"Bearer {args.admin_token}"})[0]
    ready = lambda: http("GET", rx + "/readyz", timeout=30)[0]

    # The pace of SETs: a token released every 1/SET_RATE s to 8 senders.
    paced_queue = todo
    todo = queue.Queue()

    def pacer():
        while not stop.is_set():
            try:
                todo.put(paced_queue.get_nowait())
            except queue.Empty:
                pass
            time.sleep(1 / SET_RATE)

    threads = [threading.Thread(target=pacer, daemon=True)]
    threads += [threading.Thread(target=sender, daemon=True) for _ in range(8)]
    # Enough concurrent callers that, were each timed-out call to keep its connection, the pool's 20 would all be
    # taken within one 20 s outage (as they were before calls closed them).
    threads += [threading.Thread(target=paced("sign-in", 0.5, sign_in), daemon=True) for _ in range(2)]
    threads += [threading.Thread(target=paced("session", 0.2, check), daemon=True) for _ in range(4)]
    threads += [
        threading.Thread(target=paced("admin", 1.0, stats), daemon=True),
        threading.Thread(target=paced("readyz", 0.25, ready), daemon=True),
    ]
    for thread in threads:
        thread.start()

    windows = []  # (fault, start, heal)
    for fault, length in FAULTS:
        time.sleep(CALM)
        print(f"network-faults: {fault}", file=sys.stderr)
        start = time.monotonic()
        if fault == "failover":
            subprocess.run(["bash", "-c", args.stop_primary], check=True, capture_output=True)
            subprocess.run(["bash", "-c", args.promote_standby], check=True, capture_output=True)
            control(args.control_port, "retarget", str(args.standby_port))
            database_port = args.standby_port
        else:
            control(args.control_port, fault)
            time.sleep(length)
            control(args.control_port, "forward")
        heal = time.monotonic()
        windows.append((fault, start, heal))
        # Wait for the first acknowledged SET after the heal (or the limit) before the next fault.
        deadline = heal + RECOVERY_LIMIT + 5
        while time.monotonic() < deadline:
            with recorder.lock:
                if any(r[0] == "set" and r[3] == 202 and r[2] > heal for r in recorder.records):
                    break
            time.sleep(0.2)
        time.sleep(3)

    # Let every SET through, then stop the load.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not paced_queue.empty() or not todo.empty()):
        time.sleep(0.5)
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join(timeout=40)

    failures = []
    records = recorder.records
    print("fault      recovery  longest answer during the outage (SET / sign-in / session / admin / readyz)  /readyz 503 seen")
    for index, (fault, start, heal) in enumerate(windows):
        after = [r for r in records if r[0] == "set" and r[3] == 202 and r[2] > heal]
        recovery = min(r[2] for r in after) - heal if after else None
        end = heal + (recovery or RECOVERY_LIMIT)
        during = [r for r in records if start <= r[1] <= end]
        longest = {kind: max([r[2] - r[1] for r in during if r[0] == kind], default=0.0)
                   for kind in ["set", "sign-in", "session", "admin", "readyz"]}
        not_ready = any(r[0] == "readyz" and r[3] == 503 and start <= r[1] <= heal for r in records)
        print(f"{fault:10} {('%.1f s' % recovery) if recovery is not None else 'NEVER':>8}  "
              + " / ".join(f"{longest[k]:.1f}" for k in ["set", "sign-in", "session", "admin", "readyz"])
              + f" s  {'yes' if not_ready else 'NO'}")
        if recovery is None or recovery > RECOVERY_LIMIT:
            failures.append(f"{fault}: no SET acknowledged within {RECOVERY_LIMIT:.0f} s of the heal")
        if fault != "failover" and not not_ready:
            failures.append(f"{fault}: /readyz never said 503 during the outage")

    # Bounded answers, the whole run.
    limits = {"set": bound, "sign-in": bound, "session": bound, "admin": bound, "readyz": 3.0}
    for kind, limit in limits.items():
        slow = [r for r in records if r[0] == kind and r[2] - r[1] > limit]
        if slow:
            worst = max(r[2] - r[1] for r in slow)
            failures.append(f"{len(slow)} {kind} answers took longer than {limit:.1f} s (the longest {worst:.1f} s)")
    unexpected = [r for r in records if r[0] in ("set-refused",)]
    if unexpected:
        failures.append(f"{len(unexpected)} SETs refused with {sorted({str(r[3]) for r in unexpected})}")
    for kind, good in [("sign-in", 200), ("session", 200), ("admin", 200), ("readyz", 200)]:
        odd = {str(r[3]) for r in records if r[0] == kind and r[3] not in (good, 503)}
        if odd:
            failures.append(f"{kind} answered {sorted(odd)} besides {good} and 503")

    # The database, against what was acknowledged.
    for _ in range(120):
        if psql("SELECT count(*) FROM risc_events WHERE status <> 'done'") == "0":
            break
        time.sleep(0.5)
    stored = {}
    for line in psql("SELECT jti || ' ' || status FROM risc_events WHERE issuer NOT LIKE '%never%'").splitlines():
        key, state = line.split(" ")
        stored[key] = state
    lost = [key for key in recorder.acknowledged if key not in stored]
    not_done = [key for key in recorder.acknowledged if stored.get(key) not in (None, "done")]
    twice = psql(
        "SELECT count(*) FROM (SELECT event_id, kind FROM risc_event_actions GROUP BY event_id, kind HAVING count(*) > 1) AS t")
    missing = psql(
        "SELECT count(*) FROM risc_events e WHERE e.status = 'done' AND NOT EXISTS (SELECT 1 FROM risc_event_actions a WHERE a.event_id = e.id)")
    answers = {kind: sum(1 for r in records if r[0] == kind) for kind in ["set", "sign-in", "session", "admin", "readyz"]}
    print(f"acknowledged {len(recorder.acknowledged)} of {len(tokens)} SETs; lost {len(lost)}; not done {len(not_done)}; "
          f"applied twice {twice}; stored without actions {missing}; answers: {answers}")
    if len(recorder.acknowledged) != len(tokens):
        failures.append(f"only {len(recorder.acknowledged)} of {len(tokens)} SETs were ever acknowledged")
    if lost:
        failures.append(f"{len(lost)} acknowledged SETs are not stored")
    if not_done:
        failures.append(f"{len(not_done)} acknowledged SETs are not done")
    if twice != "0" or missing != "0":
        failures.append(f"{twice} actions applied twice, {missing} events without actions")
    for failure in failures:
        print("network-faults: VIOLATION: " + failure, file=sys.stderr)
    print("network-faults: " + ("FAILED" if failures else "no violations"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
