#!/usr/bin/env python3
"""Fault-injection suite helper (Python 3 standard library only), driven by scripts/fault-suite.sh.

  fault_sim.py setup  ...  sign users in (sessions) and store refresh-token grants; writes a state file
  fault_sim.py send   ...  the transmitter simulator: plans >= 10,000 SETs over every event type, has the
                           development transmitter sign each (explicit jti and iat), and delivers them like Google:
                           503 / connection error / timeout -> retry the same SET with a short backoff until 202
  fault_sim.py drain  ...  waits (bounded) until no event is pending or retry
  fault_sim.py check  ...  compares the database with what was acknowledged; prints the summary; exit 1 on violations

Loopback only: every URL must name 127.0.0.1.
"""
import argparse
import base64
import collections
import csv
import hashlib
import http.client
import io
import json
import os
import queue
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

RISC = "https://schemas.openid.net/secevent/risc/event-type/"
OAUTH = "https://schemas.openid.net/secevent/oauth/event-type/"
CAEP = "https://schemas.openid.net/secevent/caep/event-type/"
T_SESSIONS_REVOKED = RISC + "sessions-revoked"
T_TOKENS_REVOKED = OAUTH + "tokens-revoked"
T_TOKEN_REVOKED = OAUTH + "token-revoked"
T_DISABLED = RISC + "account-disabled"
T_ENABLED = RISC + "account-enabled"
T_CRED_REQUIRED = RISC + "account-credential-change-required"
T_VERIFICATION = RISC + "verification"
T_CAEP_SESSION = CAEP + "session-revoked"
T_CAEP_CRED = CAEP + "credential-change"
T_UNKNOWN = "https://example.com/secevent/fault-suite/unknown-type"

# The actions each event records (Sources/RISC/AccountAction.swift), by (type, reason).
EXPECTED_KINDS = {
    (T_SESSIONS_REVOKED, None): ["revoke_sessions"],
    (T_CAEP_SESSION, None): ["revoke_sessions"],
    (T_TOKENS_REVOKED, None): ["delete_grants", "revoke_sessions"],
    (T_TOKEN_REVOKED, "prefix"): ["delete_grant_by_prefix"],
    (T_TOKEN_REVOKED, "hash"): ["delete_grant_by_hash"],
    (T_DISABLED, None): ["disable_sign_in"],
    (T_DISABLED, "hijacking"): ["disable_sign_in", "revoke_sessions"],
    (T_DISABLED, "bulk-account"): ["disable_sign_in", "flag_for_review"],
    (T_ENABLED, None): ["enable_sign_in"],
    (T_CRED_REQUIRED, None): ["require_credential_change"],
    (T_CAEP_CRED, None): ["require_credential_change"],
    (T_VERIFICATION, None): ["record_verification"],
    (T_UNKNOWN, None): [],
}
SESSION_REVOKING = {T_SESSIONS_REVOKED, T_TOKENS_REVOKED, T_CAEP_SESSION}
STATE_TYPES = {T_DISABLED, T_ENABLED}


def short(type_uri):
    return type_uri.rsplit("/", 1)[-1] + (" (CAEP)" if type_uri.startswith(CAEP) else "")


def loopback(url):
    parts = urllib.parse.urlsplit(url)
    if parts.hostname != "127.0.0.1":
        sys.exit(f"fault_sim: refusing non-loopback URL {url}")
    return parts.hostname, parts.port


class Client:
    """One keep-alive HTTP/1.1 connection; reconnects after any error."""

    def __init__(self, url, timeout=10.0):
        self.host, self.port = loopback(url)
        self.timeout = timeout
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            resp = self.conn.getresponse()
            data = resp.read()
            if resp.getheader("Connection", "").lower() == "close":
                self.close()
            return resp.status, data
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None


def json_call(client, path, payload, headers=None, tries=20):
    """POST JSON to a helper endpoint (transmitter or setup calls), retrying transient failures."""
    body = json.dumps(payload).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    last = None
    for attempt in range(tries):
        try:
            status, data = client.request("POST", path, body, h)
            if status < 500:
                return status, data
            last = f"HTTP {status}: {data[:200]!r}"
        except (OSError, http.client.HTTPException) as error:
            last = repr(error)
        time.sleep(min(0.05 * 2 ** attempt, 1.0))
    raise RuntimeError(f"POST {path} failed: {last}")


# ---------------------------------------------------------------------------------------------------------------
# setup


def cmd_setup(args):
    rng = random.Random(args.seed)
    users = []
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"
    for i in range(args.users):
        sub = f"{args.sub_prefix}{i:05d}"
        grants = []
        for j in range(1 + (i % 2)):  # 1-2 grants for the SETs' audience
            token = f"1//0f{i:05d}{j}" + "".join(rng.choice(alphabet) for _ in range(48))
            grants.append({"token": token, "client_id": args.audience})
        if i % 12 == 1:  # a grant of another client: a token-revoked for the audience must not erase it
            token = f"1//0f{i:05d}9" + "".join(rng.choice(alphabet) for _ in range(48))
            grants.append({"token": token, "client_id": args.other_client, "foreign": True})
        users.append({"sub": sub, "index": i, "sessions": 1 + (i % 3 == 0), "grants": grants})
    prefixes = [g["token"][:16] for u in users for g in u["grants"]]
    assert len(set(prefixes)) == len(prefixes), "refresh-token prefixes must be unique"

    work = queue.Queue()
    for u in users:
        work.put(u)
    errors = []

    def run():
        rx, tx = Client(args.rx), Client(args.tx)
        while True:
            try:
                u = work.get_nowait()
            except queue.Empty:
                return
            try:
                for _ in range(u["sessions"]):
                    status, data = json_call(tx, "/dev/idtoken", {"sub": u["sub"], "email": f"{u['sub']}@example.com"})
                    if status != 200:
                        raise RuntimeError(f"/dev/idtoken: HTTP {status} {data[:200]!r}")
                    idtoken = json.loads(data)["id_token"]
                    status, data = json_call(rx, "/tokensignin", {"idToken": idtoken})
                    if status != 200:
                        raise RuntimeError(f"/tokensignin {u['sub']}: HTTP {status} {data[:200]!r}")
                    json.loads(data)["session_token"]
                for g in u["grants"]:
                    status, data = json_call(
                        rx, "/v1/grants", {"sub": u["sub"], "refresh_token": g["token"], "client_id": g["client_id"]},
                        headers={"Authorization": f"Bearer {args.service_token}"})
                    if status != 201:
                        raise RuntimeError(f"/v1/grants {u['sub']}: HTTP {status} {data[:200]!r}")
                    g["grant_id"] = json.loads(data)["grant_id"]
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(str(error))

    threads = [threading.Thread(target=run) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("setup failed: " + "; ".join(errors[:5]))
    with open(args.out, "w") as f:
        json.dump({"audience": args.audience, "other_client": args.other_client, "users": users,
                   "setup_done": time.time()}, f)
    print(f"setup: {len(users)} users, {sum(u['sessions'] for u in users)} sessions, "
          f"{sum(len(u['grants']) for u in users)} grants", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------------
# plan


class SET:
    __slots__ = ("idx", "jti", "type", "sub", "reason", "alg", "token_ref", "iat", "aud", "malformed", "copies",
                 "concurrent", "deps", "dependents", "token", "lock", "deliveries", "acked", "acked_at", "final",
                 "first_sent", "state")

    def __init__(self, idx, type_, iat, sub=None, reason=None, alg=None, token_ref=None, aud=None, malformed=None):
        self.idx, self.type, self.iat, self.sub, self.reason = idx, type_, iat, sub, reason
        self.alg, self.token_ref, self.aud, self.malformed = alg, token_ref, aud, malformed
        self.jti = f"fault-{idx:06d}-{secrets.token_hex(6)}"
        self.copies = 1          # sequential deliveries of the same SET (2-3: deliberate duplicates)
        self.concurrent = False  # two deliveries racing on two connections
        self.deps = 0            # acknowledgements still awaited before this SET may be sent
        self.dependents = []
        self.token = None
        self.lock = threading.Lock()
        self.deliveries = []
        self.acked = False
        self.acked_at = None
        self.final = None
        self.first_sent = None
        self.state = None


def plan(state, count, seed, t0):
    """Every event type, with user profiles that keep the expected end state unambiguous."""
    rng = random.Random(seed)
    users = state["users"]
    audience = state["audience"]
    sets = []

    def add(type_, **kw):
        s = SET(len(sets), type_, kw.pop("iat", None) or (t0 + rng.randint(0, 200)), **kw)
        sets.append(s)
        return s

    used_iat = collections.defaultdict(set)

    def state_iat(sub):
        while True:
            offset = rng.randint(1, 200)
            if offset not in used_iat[sub]:  # never two account-state events of one user with the same iat
                used_iat[sub].add(offset)
                return t0 + offset

    # Profiles (by index): session revocation 0 none, 1 sessions-revoked family, 2 tokens-revoked, 3 hijacking;
    # grants (users without tokens-revoked) 0 untouched, 1 one grant revoked by prefix, 2 by hash;
    # credential change for every fifth user.
    for u in users:
        i = u["index"]
        u["sess_mode"] = i % 4
        u["grant_mode"] = 0 if u["sess_mode"] == 2 else (i // 4) % 3
        u["cred"] = i % 5 == 2
        own = [g for g in u["grants"] if not g.get("foreign")]
        u["target"] = own[-1]["token"] if u["grant_mode"] else None

    eligible = {
        "sessions-revoked": [u for u in users if u["sess_mode"] in (1, 2)],
        "caep-session": [u for u in users if u["sess_mode"] == 1],
        "tokens-revoked": [u for u in users if u["sess_mode"] == 2],
        "token-prefix": [u for u in users if u["grant_mode"] == 1],
        "token-hash": [u for u in users if u["grant_mode"] == 2],
        "hijacking": [u for u in users if u["sess_mode"] == 3],
        "cred": [u for u in users if u["cred"]],
    }

    def emit(kind, u=None):
        if kind == "sessions-revoked":
            return add(T_SESSIONS_REVOKED, sub=u["sub"])
        if kind == "caep-session":
            return add(T_CAEP_SESSION, sub=u["sub"])
        if kind == "tokens-revoked":
            return add(T_TOKENS_REVOKED, sub=u["sub"])
        if kind == "token-prefix":
            return add(T_TOKEN_REVOKED, alg="prefix", token_ref=u["target"])
        if kind == "token-hash":
            return add(T_TOKEN_REVOKED, alg="hash", token_ref=u["target"])
        if kind == "hijacking":
            return add(T_DISABLED, sub=u["sub"], reason="hijacking", iat=state_iat(u["sub"]))
        if kind in ("disabled", "bulk-account"):
            return add(T_DISABLED, sub=u["sub"], reason=None if kind == "disabled" else "bulk-account",
                       iat=state_iat(u["sub"]))
        if kind == "enabled":
            return add(T_ENABLED, sub=u["sub"], iat=state_iat(u["sub"]))
        if kind == "cred":
            return add(rng.choice([T_CRED_REQUIRED, T_CAEP_CRED]), sub=u["sub"])
        if kind == "verification":
            return add(T_VERIFICATION)
        raise ValueError(kind)

    # Every user's profile gets at least one event that defines it.
    for u in users:
        if u["sess_mode"] == 1:
            emit(rng.choice(["sessions-revoked", "caep-session"]), u)
        elif u["sess_mode"] == 2:
            emit("tokens-revoked", u)
        elif u["sess_mode"] == 3:
            emit("hijacking", u)
        if u["grant_mode"]:
            emit("token-prefix" if u["grant_mode"] == 1 else "token-hash", u)
        if u["cred"]:
            emit("cred", u)
        for g in u["grants"]:
            if g.get("foreign"):  # names the other client's grant: the SET's aud is not its client
                add(T_TOKEN_REVOKED, alg=rng.choice(["prefix", "hash"]), token_ref=g["token"])
        for _ in range(rng.randint(0, 3)):
            emit(rng.choice(["disabled", "bulk-account", "enabled", "enabled"]), u)

    for n in range(20):  # unknown types: stored as ignored
        add(T_UNKNOWN, sub=rng.choice(users)["sub"])
    # Deliberately malformed: a broken signature (invalid_key) and a foreign audience (invalid_audience).
    for n in range(5):
        add(T_SESSIONS_REVOKED, sub=rng.choice(users)["sub"], malformed="bad-signature")
        add(T_SESSIONS_REVOKED, sub=rng.choice(users)["sub"], malformed="wrong-audience", aud="not-our-client")

    weights = {"sessions-revoked": 12, "caep-session": 7, "tokens-revoked": 6, "token-prefix": 4, "token-hash": 4,
               "hijacking": 6, "disabled": 9, "bulk-account": 6, "enabled": 14, "cred": 9, "verification": 8}
    kinds, wts = zip(*weights.items())
    while len(sets) < count:
        kind = rng.choices(kinds, wts)[0]
        if kind == "verification":
            emit(kind)
        elif kind in ("disabled", "bulk-account", "enabled"):
            u = rng.choice(users)
            if len(used_iat[u["sub"]]) < 150:
                emit(kind, u)
        else:
            emit(kind, rng.choice(eligible[kind]))

    # Deliberate duplicates: ~6% delivered 2-3 times one after another, ~2% twice at the same moment.
    for s in sets:
        if s.malformed:
            continue
        r = rng.random()
        if r < 0.06:
            s.copies = rng.choice([2, 2, 3])
        elif r < 0.08:
            s.concurrent = True

    # Out-of-order iat: for every other user with several account-state events, deliver them newest first,
    # each older one only after the newer one was acknowledged. The others go in random order.
    by_user = collections.defaultdict(list)
    for s in sets:
        if s.type in STATE_TYPES:
            by_user[s.sub].append(s)
    reversed_users = 0
    for u in users:
        evs = sorted(by_user.get(u["sub"], []), key=lambda s: s.iat, reverse=True)
        if len(evs) >= 2 and u["index"] % 2 == 0:
            reversed_users += 1
            for newer, older in zip(evs, evs[1:]):
                newer.dependents.append(older)
                older.deps += 1
    rng.shuffle(sets)
    return sets, reversed_users


# ---------------------------------------------------------------------------------------------------------------
# send


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.posts = 0
        self.retry_503 = 0
        self.retry_conn = 0
        self.retry_timeout = 0
        self.failures = []   # (time, kind) of every non-202 attempt, for the per-fault breakdown
        self.other = collections.Counter()


def tamper(token):
    header, payload, sig = token.split(".")
    mid = len(sig) // 2
    sig = sig[:mid] + ("A" if sig[mid] != "A" else "B") + sig[mid + 1:]
    return ".".join([header, payload, sig])


def cmd_send(args):
    state = json.load(open(args.state))
    t0 = int(time.time()) + 2
    sets, reversed_users = plan(state, args.count, args.seed, t0)
    tokens_by_value = {g["token"]: g for u in state["users"] for g in u["grants"]}
    stats = Stats()
    ready = queue.Queue()
    started = time.time()
    print(f"send: {len(sets)} SETs planned ({reversed_users} users get account-state events newest first); "
          f"{sum(s.copies - 1 for s in sets) + sum(s.concurrent for s in sets)} extra duplicate deliveries; "
          f"{args.threads} connections; paced over ~{args.duration:.0f}s", file=sys.stderr)

    outstanding = [0]
    outstanding_lock = threading.Lock()
    done_event = threading.Event()

    def release(s):
        with outstanding_lock:
            outstanding[0] += 2 if s.concurrent else 1
        ready.put(s)
        if s.concurrent:
            ready.put(s)

    def finished_delivery():
        with outstanding_lock:
            outstanding[0] -= 1

    def sign(tx, s):
        with s.lock:
            if s.token is not None:
                return s.token
            req = {"type": s.type, "jti": s.jti, "iat": s.iat}
            if s.sub is not None:
                req["sub"] = s.sub
            if s.reason is not None:
                req["reason"] = s.reason
            if s.token_ref is not None:
                req["token"] = s.token_ref
                req["alg"] = s.alg
            if s.type == T_VERIFICATION:
                req["state"] = "fault-" + s.jti
            if s.aud is not None:
                req["aud"] = s.aud
            status, data = json_call(tx, "/dev/sign", req)
            if status != 200:
                raise RuntimeError(f"/dev/sign: HTTP {status} {data[:200]!r}")
            token = json.loads(data)["token"]
            if s.malformed == "bad-signature":
                token = tamper(token)
            s.token = token
            return token

    def deliver(rx, s):
        """One delivery of a SET as Google does it: the same token until a final answer."""
        body = s.token.encode()
        headers = {"Content-Type": "application/secevent+jwt", "Accept": "application/json"}
        attempts = retries = 0
        first = time.time()
        with s.lock:
            if s.first_sent is None:
                s.first_sent = first
        backoff = 0.1
        while True:
            attempts += 1
            kind = None
            try:
                status, data = rx.request("POST", "/risc/events", body, headers)
            except socket.timeout:
                kind, status, data = "timeout", None, b""
            except (OSError, http.client.HTTPException):
                kind, status, data = "conn", None, b""
            with stats.lock:
                stats.posts += 1
                if kind == "timeout":
                    stats.retry_timeout += 1
                elif kind == "conn":
                    stats.retry_conn += 1
                elif status == 503:
                    stats.retry_503 += 1
                if kind or status == 503:
                    stats.failures.append((time.time(), kind or "503"))  # when the failure was seen
            if status in (202, 400) or (status is not None and status not in (503,) and status < 500):
                return {"status": status, "attempts": attempts, "retries": retries,
                        "wait": time.time() - first, "body": data[:300].decode("utf-8", "replace"),
                        "at": time.time()}
            if status is not None and status != 503:
                with stats.lock:
                    stats.other[status] += 1
            if time.time() - first > args.give_up:
                return {"status": status, "attempts": attempts, "retries": retries, "wait": time.time() - first,
                        "body": "gave up: " + (kind or str(status)), "at": time.time()}
            retries += 1
            time.sleep(backoff * (0.5 + random.random() / 2))
            backoff = min(backoff * 2, 1.0)

    def worker():
        rx, tx = Client(args.rx, timeout=args.timeout), Client(args.tx)
        while True:
            s = ready.get()
            if s is None:
                return
            try:
                sign(tx, s)
                for copy in range(s.copies):
                    d = deliver(rx, s)
                    d["copy"] = copy
                    with s.lock:
                        s.deliveries.append(d)
                        newly_acked = d["status"] == 202 and not s.acked
                        if newly_acked:
                            s.acked, s.acked_at = True, d["at"]
                    if newly_acked:
                        for dep in s.dependents:
                            with dep.lock:
                                dep.deps -= 1
                                go = dep.deps == 0
                            if go:
                                release(dep)
                    if d["status"] != 202:
                        break
            except Exception as error:  # noqa: BLE001
                with s.lock:
                    s.deliveries.append({"status": None, "attempts": 0, "retries": 0, "wait": 0,
                                         "body": f"simulator error: {error}", "at": time.time(), "copy": 0})
            finally:
                finished_delivery()
                with outstanding_lock:
                    if outstanding[0] == 0 and feeding_done.is_set():
                        done_event.set()

    feeding_done = threading.Event()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.threads)]
    for t in threads:
        t.start()

    # Pace the independent SETs over the target duration, so the faults (driven by the shell script) land under
    # load; the last 3% wait for the marker that says every fault was injected.
    independent = [s for s in sets if s.deps == 0]
    interval = args.duration / max(1, len(independent))
    hold_from = int(len(independent) * 0.97)
    last_report = time.time()
    for n, s in enumerate(independent):
        if n == hold_from and args.marker:
            deadline = time.time() + args.marker_timeout
            while not os.path.exists(args.marker) and time.time() < deadline:
                time.sleep(0.2)
        target = started + n * interval
        delay = target - time.time()
        if delay > 0:
            time.sleep(delay)
        # Back-pressure: never more than a few hundred queued behind a stalled receiver.
        while ready.qsize() > 4 * args.threads:
            time.sleep(0.02)
        release(s)
        if time.time() - last_report > 15:
            last_report = time.time()
            with stats.lock:
                print(f"send: {time.time() - started:5.1f}s queued {n + 1}/{len(independent)}, posts {stats.posts}, "
                      f"503 {stats.retry_503}, conn errors {stats.retry_conn}, timeouts {stats.retry_timeout}",
                      file=sys.stderr)
    feeding_done.set()
    with outstanding_lock:
        if outstanding[0] == 0:
            done_event.set()
    while not done_event.wait(1):
        pass
    for _ in threads:
        ready.put(None)
    for t in threads:
        t.join(5)
    elapsed = time.time() - started

    never_sent = [s for s in sets if not s.deliveries]
    with open(args.results, "w") as f:
        for s in sets:
            f.write(json.dumps({
                "jti": s.jti, "type": s.type, "sub": s.sub, "reason": s.reason, "alg": s.alg, "iat": s.iat,
                "token_ref": s.token_ref, "malformed": s.malformed, "copies": s.copies, "concurrent": s.concurrent,
                "acked": s.acked, "acked_at": s.acked_at, "first_sent": s.first_sent, "deliveries": s.deliveries,
                "foreign": bool(s.token_ref and tokens_by_value.get(s.token_ref, {}).get("foreign")),
            }) + "\n")
    with open(args.results + ".stats", "w") as f:
        json.dump({"posts": stats.posts, "retry_503": stats.retry_503, "retry_conn": stats.retry_conn,
                   "retry_timeout": stats.retry_timeout, "other": dict(stats.other), "elapsed": elapsed,
                   "failures": stats.failures, "never_sent": len(never_sent), "t0": t0}, f)
    print(f"send: finished in {elapsed:.1f}s, {stats.posts} POSTs", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------------
# database access (psql)


def psql_rows(args, sql):
    cmd = [args.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", args.database_url,
           "-c", f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return list(csv.reader(io.StringIO(out)))


def cmd_drain(args):
    deadline = time.time() + args.timeout
    started = time.time()
    while True:
        (n,), = psql_rows(args, "SELECT count(*) FROM risc_events WHERE status IN ('pending', 'retry')")
        if int(n) == 0:
            print(f"drain: queue empty after {time.time() - started:.1f}s", file=sys.stderr)
            return
        if time.time() > deadline:
            print(f"drain: {n} events still pending/retry after {args.timeout}s", file=sys.stderr)
            return
        time.sleep(0.5)


# ---------------------------------------------------------------------------------------------------------------
# check


def cmd_check(args):
    state = json.load(open(args.state))
    results = [json.loads(line) for line in open(args.results)]
    stats = json.load(open(args.results + ".stats"))
    timeline = []
    if args.timeline and os.path.exists(args.timeline):
        for line in open(args.timeline):
            t, _, label = line.strip().partition(" ")
            timeline.append((float(t), label))
    exits = []
    if args.exits and os.path.exists(args.exits):
        for line in open(args.exits):
            label, got, want = line.split()
            exits.append((label, int(got), int(want)))

    violations = collections.defaultdict(list)

    def violate(category, text):
        violations[category].append(text)

    users = {u["sub"]: u for u in state["users"]}
    audience = state["audience"]
    grant_by_token = {g["token"]: (u["sub"], g) for u in state["users"] for g in u["grants"]}

    # --- deliveries ---------------------------------------------------------------------------------------------
    acked = [r for r in results if r["acked"]]
    acked_jtis = {r["jti"] for r in acked}
    for r in results:
        for d in r["deliveries"]:
            if d["status"] == 202:
                continue
            if r["malformed"] and d["status"] == 400:
                continue
            violate("delivery", f"{r['jti']} ({short(r['type'])}, copy {d.get('copy')}): "
                                f"final HTTP {d['status']} after {d['attempts']} attempts: {d['body'][:160]}")
        if not r["deliveries"]:
            violate("delivery", f"{r['jti']} ({short(r['type'])}): never sent")
        if r["malformed"] and r["acked"]:
            violate("delivery", f"{r['jti']}: deliberately malformed ({r['malformed']}) but answered 202")
    waits = [d["wait"] for r in results for d in r["deliveries"] if d["status"] == 202]
    attempts = [d["attempts"] for r in results for d in r["deliveries"]]

    # --- stored events ------------------------------------------------------------------------------------------
    rows = psql_rows(args, "SELECT id, issuer, jti, status, event_types[1], coalesce(subject_sub, ''), "
                           "extract(epoch FROM issued_at)::float8, attempts, coalesce(last_error, '') FROM risc_events")
    stored = collections.defaultdict(list)
    for id_, issuer, jti, status, etype, sub, iat, att, err in rows:
        stored[(issuer, jti)].append({"id": int(id_), "status": status, "type": etype, "sub": sub,
                                      "iat": float(iat), "attempts": int(att), "error": err})
    by_jti = collections.defaultdict(list)
    for (issuer, jti), evs in stored.items():
        by_jti[jti].extend((issuer, e) for e in evs)
    lost = [j for j in acked_jtis if j not in by_jti]
    duplicated = [j for j, evs in by_jti.items() if len(evs) > 1]
    issuers = {issuer for (issuer, _) in stored}
    dup_issuer_jti = [k for k, evs in stored.items() if len(evs) > 1]
    for j in lost:
        violate("storage", f"lost: {j} was answered 202 but is not stored")
    for j in duplicated:
        violate("storage", f"duplicated: {j} is stored {len(by_jti[j])} times")
    planned = {r["jti"]: r for r in results}
    for j in by_jti:
        if j not in planned:
            violate("storage", f"unexpected stored SET {j}")
        elif planned[j]["malformed"]:
            violate("storage", f"malformed SET {j} ({planned[j]['malformed']}) was stored")
    stored_not_acked = [j for j in by_jti if j in planned and not planned[j]["acked"] and not planned[j]["malformed"]]

    # --- statuses -----------------------------------------------------------------------------------------------
    status_counts = collections.Counter()
    for j, evs in by_jti.items():
        for _, e in evs:
            status_counts[e["status"]] += 1
            want = "ignored" if e["type"] == T_UNKNOWN else "done"
            if e["status"] != want:
                violate("status", f"event {e['id']} ({short(e['type'])}, jti {j}): status {e['status']}, expected "
                                  f"{want}; attempts {e['attempts']}; last error {e['error'][:160]!r}")

    # --- actions ------------------------------------------------------------------------------------------------
    action_rows = psql_rows(args, "SELECT event_id, kind, coalesce(sub, ''), coalesce(detail, ''), rows_affected "
                                  "FROM risc_event_actions ORDER BY id")
    actions = collections.defaultdict(list)
    for event_id, kind, sub, detail, n in action_rows:
        actions[int(event_id)].append((kind, sub, detail, int(n)))
    id_to_jti = {e["id"]: j for j, evs in by_jti.items() for _, e in evs}
    for event_id, acts in actions.items():
        seen = collections.Counter((k, s, d) for k, s, d, _ in acts)
        for key, n in seen.items():
            if n > 1:
                violate("actions", f"event {event_id}: action {key} recorded {n} times")
    for j, evs in by_jti.items():
        r = planned.get(j)
        if not r:
            continue
        reason = r["alg"] if r["type"] == T_TOKEN_REVOKED else r["reason"]
        want = sorted(EXPECTED_KINDS[(r["type"], reason)])
        for _, e in evs:
            if e["status"] not in ("done", "ignored"):
                continue
            got = sorted(k for k, _, _, _ in actions.get(e["id"], []))
            if got != want:
                cat = "actions" if len(got) > len(want) else "actions-kind"
                violate(cat, f"event {e['id']} ({short(r['type'])}{'/' + reason if reason else ''}): actions {got}, "
                             f"expected {want} {[a for a in actions.get(e['id'], []) if a[0] == 'skip'][:1]}")
            # token-revoked: 1 row for our audience's grant the first time (0 on repeats); 0 for another client's
            if r["type"] == T_TOKEN_REVOKED:
                for k, s, d, n in actions.get(e["id"], []):
                    if n > 1:
                        violate("token-revoked", f"event {e['id']}: {k} erased {n} grants; prefixes are unique")

    # --- end state ----------------------------------------------------------------------------------------------
    user_rows = psql_rows(args, "SELECT sub, sign_in_disabled, review_required, credential_change_required, "
                                "coalesce(extract(epoch FROM sign_in_state_at)::float8, 0) FROM risc_users")
    db_users = {sub: {"disabled": dis == "t", "review": rev == "t", "cred": cred == "t", "state_at": float(at)}
                for sub, dis, rev, cred, at in user_rows}
    session_rows = psql_rows(args, "SELECT s.id, s.sub, extract(epoch FROM s.created_at)::float8, "
                                   "s.revoked_at IS NOT NULL, coalesce(e.subject_sub, ''), coalesce(e.event_types[1], '') "
                                   "FROM risc_sessions s LEFT JOIN risc_events e ON e.id = s.revoked_by_event")
    grant_rows = psql_rows(args, "SELECT id, sub, client_id, ciphertext IS NULL, revoked_at IS NOT NULL, "
                                 "token_prefix IS NULL, token_hash IS NULL FROM risc_grants")
    flag_actions = collections.defaultdict(list)  # sub -> [(event_id, detail, rows)]
    for event_id, acts in actions.items():
        for k, s, d, n in acts:
            if k == "flag_for_review":
                flag_actions[s].append((event_id, d, n))

    per_user = collections.defaultdict(list)
    for r in acked:
        if r["sub"] and r["type"] != T_UNKNOWN and not r["malformed"]:
            per_user[r["sub"]].append(r)
    revoked_tokens = {}   # token -> first acked token-revoked
    for r in acked:
        if r["type"] == T_TOKEN_REVOKED:
            revoked_tokens.setdefault(r["token_ref"], r)

    checked = collections.Counter()
    for sub, u in users.items():
        evs = per_user.get(sub, [])
        db = db_users.get(sub)
        if db is None:
            violate("state", f"user {sub} is missing from risc_users")
            continue
        state_evs = sorted((r for r in evs if r["type"] in STATE_TYPES), key=lambda r: r["iat"])
        iats = [r["iat"] for r in state_evs]
        if len(iats) != len(set(iats)):
            violate("suite", f"user {sub}: two account-state events with the same iat (the plan must avoid it)")
        want_disabled = bool(state_evs) and state_evs[-1]["type"] == T_DISABLED
        checked["sign_in_disabled"] += 1
        if db["disabled"] != want_disabled:
            newest = state_evs[-1] if state_evs else None
            violate("sign_in_disabled", f"user {sub}: sign_in_disabled={db['disabled']}, expected {want_disabled} "
                                        f"(newest account-state event: {newest and short(newest['type'])} "
                                        f"{newest and newest['reason']} iat {newest and newest['iat']}; "
                                        f"{len(state_evs)} account-state events)")
        # review_required: certain when the newest account-state event is bulk-account; impossible without any
        # bulk-account; otherwise it must agree with the flag_for_review actions recorded (a stale one may skip).
        bulk = [r for r in state_evs if r["reason"] == "bulk-account"]
        applied_flags = [f for f in flag_actions.get(sub, []) if not f[1].startswith("skipped")]
        if state_evs and state_evs[-1]["reason"] == "bulk-account":
            want_review = True
        elif not bulk:
            want_review = False
        else:
            want_review = bool(applied_flags)
            for event_id, detail, _ in flag_actions.get(sub, []):
                if detail.startswith("skipped"):
                    ev_iat = next((e["iat"] for _, e in by_jti.get(id_to_jti.get(event_id), [])), None)
                    if ev_iat is not None and not any(r["iat"] > ev_iat for r in state_evs):
                        violate("review_required", f"user {sub}: flag_for_review of event {event_id} skipped as stale, "
                                                   f"but no newer account-state event exists")
        checked["review_required"] += 1
        if db["review"] != want_review:
            violate("review_required", f"user {sub}: review_required={db['review']}, expected {want_review} "
                                       f"({len(bulk)} bulk-account events, newest state event "
                                       f"{short(state_evs[-1]['type']) if state_evs else None}/"
                                       f"{state_evs[-1]['reason'] if state_evs else None})")
        want_cred = any(r["type"] in (T_CRED_REQUIRED, T_CAEP_CRED) for r in evs)
        checked["credential_change_required"] += 1
        if db["cred"] != want_cred:
            violate("credential_change_required", f"user {sub}: credential_change_required={db['cred']}, "
                                                  f"expected {want_cred}")
        u["_revoking"] = [r for r in evs if r["type"] in SESSION_REVOKING or r["reason"] == "hijacking"]
        u["_tokens_revoked"] = any(r["type"] == T_TOKENS_REVOKED for r in evs)

    setup_done = state["setup_done"]
    for sid, sub, created, revoked, by_sub, by_type in session_rows:
        u = users.get(sub)
        if u is None:
            continue
        revoked = revoked == "t"
        checked["sessions"] += 1
        revoking = u.get("_revoking", [])
        if float(created) > setup_done + 1:
            violate("suite", f"session {sid} of {sub} created after setup")
        if revoking and not revoked:
            kinds = sorted({short(r["type"]) + ("/" + r["reason"] if r["reason"] else "") for r in revoking})
            violate("sessions", f"session {sid} of {sub} not revoked despite {len(revoking)} revoking events {kinds}")
        elif not revoking and revoked:
            violate("sessions", f"session {sid} of {sub} revoked (by an event of {by_sub or '?'} {short(by_type)}) "
                                f"but no revoking event named the user")
        elif revoked and by_sub != sub:
            violate("sessions", f"session {sid} of {sub} revoked by an event about {by_sub!r}")

    grants_by_id = {}
    for u in state["users"]:
        for g in u["grants"]:
            grants_by_id[g["grant_id"]] = (u, g)
    for gid, sub, client_id, ct_null, revoked, prefix_null, hash_null in grant_rows:
        if gid not in grants_by_id:
            continue
        u, g = grants_by_id[gid]
        erased = ct_null == "t" and revoked == "t" and prefix_null == "t" and hash_null == "t"
        live = ct_null == "f" and revoked == "f"
        named = revoked_tokens.get(g["token"])
        checked["grants"] += 1
        if u.get("_tokens_revoked"):
            if not erased:
                violate("grants", f"grant {gid} of {sub}: not erased after tokens-revoked "
                                  f"(ciphertext NULL={ct_null}, revoked={revoked})")
        elif named and g.get("foreign"):
            checked["token-revoked audience"] += 1
            if not live:
                violate("token-revoked audience", f"grant {gid} of {sub} (client {client_id}) erased by token-revoked "
                                                  f"({named['alg']}) whose aud is {audience} only")
        elif named:
            if not erased:
                violate("grants", f"grant {gid} of {sub}: not erased after token-revoked ({named['alg']}) "
                                  f"(ciphertext NULL={ct_null}, revoked={revoked})")
        elif not live:
            violate("grants", f"grant {gid} of {sub}: erased, but no event named it")

    # --- process exits ------------------------------------------------------------------------------------------
    for label, got, want in exits:
        if got != want:
            violate("process", f"{label}: exit status {got}, expected {want}")

    # --- summary ------------------------------------------------------------------------------------------------
    unique_acked = len(acked_jtis)
    print()
    print("Fault-injection suite: summary")
    print(f"  SETs planned           {len(results)} ({sum(1 for r in results if r['malformed'])} deliberately malformed, "
          f"{sum(1 for r in results if r['type'] == T_UNKNOWN)} of an unknown type)")
    by_type = collections.Counter(short(r["type"]) + ("/" + (r["reason"] or r["alg"]) if (r["reason"] or r["alg"]) else "")
                                  for r in results if not r["malformed"])
    print("  by type                " + ", ".join(f"{k} {v}" for k, v in sorted(by_type.items())))
    print(f"  HTTP POSTs             {stats['posts']} (deliberate duplicate deliveries: "
          f"{sum(r['copies'] - 1 for r in results) + sum(r['concurrent'] for r in results)})")
    print(f"  acknowledged (202)     {unique_acked}")
    print(f"  lost (202, not stored) {len(lost)}")
    print(f"  duplicated (stored >1) {len(duplicated) + len(dup_issuer_jti)}")
    print(f"  stored, never 202'd    {len(stored_not_acked)}")
    print(f"  stored by status       " + ", ".join(f"{k} {v}" for k, v in sorted(status_counts.items())))
    print(f"  HTTP retries           {stats['retry_503'] + stats['retry_conn'] + stats['retry_timeout']} "
          f"(503: {stats['retry_503']}, connection errors: {stats['retry_conn']}, timeouts: {stats['retry_timeout']})"
          + (f", other statuses {stats['other']}" if stats["other"] else ""))
    if attempts:
        print(f"  attempts per delivery  max {max(attempts)}, mean {sum(attempts) / len(attempts):.3f}")
    if waits:
        waits_sorted = sorted(waits)
        print(f"  wait before 202        longest {max(waits):.2f}s, p99 {waits_sorted[int(len(waits) * 0.99)]:.3f}s, "
              f"median {waits_sorted[len(waits) // 2]:.3f}s")
    if timeline:
        print("  retries by fault window:")
        bounds = timeline + [(float("inf"), "end")]
        buckets = collections.Counter()
        for t, kind in stats["failures"]:
            label = "before faults"
            for (ts, lab), (nxt, _) in zip(bounds, bounds[1:]):
                if ts <= t < nxt:
                    label = lab
            buckets[(label, kind)] += 1
        longest = collections.defaultdict(float)
        for r in results:
            for d in r["deliveries"]:
                if d["status"] == 202:
                    start = d["at"] - d["wait"]
                    label = "before faults"
                    for (ts, lab), (nxt, _) in zip(bounds, bounds[1:]):
                        if ts <= start < nxt:
                            label = lab
                    longest[label] = max(longest[label], d["wait"])
        for t, label in timeline:
            parts = [f"{kind} {buckets[(label, kind)]}" for kind in ("503", "conn", "timeout") if buckets[(label, kind)]]
            print(f"    +{t - timeline[0][0]:6.1f}s {label:<34} {', '.join(parts) or 'no retries'}; "
                  f"longest wait {longest[label]:.2f}s")
    # Evidence that the out-of-order and retry paths were exercised.
    state_noop = sum(1 for acts in actions.values() for k, _, _, n in acts
                     if k in ("disable_sign_in", "enable_sign_in") and n == 0)
    reordered = sum(1 for r in results if r["type"] in STATE_TYPES and r["acked"]
                    and any(o["iat"] > r["iat"] and o["acked_at"] and o["acked_at"] < (r["acked_at"] or 0)
                            for o in per_user.get(r["sub"], []) if o["type"] in STATE_TYPES))
    retried_events = sum(1 for evs in by_jti.values() for _, e in evs if e["attempts"] > 1)
    print(f"  out of order           {reordered} account-state SETs acknowledged after a newer one for the same user; "
          f"{state_noop} account-state actions changed nothing (stale)")
    print(f"  worker retries         {retried_events} events needed more than one worker attempt")
    print(f"  send phase             {stats['elapsed']:.1f}s")
    if args.run_started:
        print(f"  whole run              {time.time() - args.run_started:.1f}s")
    print("  checked                " + ", ".join(f"{k} {v}" for k, v in checked.items()))
    total = sum(len(v) for v in violations.values())
    if total:
        print(f"\nVIOLATIONS: {total}")
        for cat, items in sorted(violations.items()):
            print(f"  [{cat}] {len(items)}")
            for text in items[:args.show]:
                print(f"    - {text}")
            if len(items) > args.show:
                print(f"    ... {len(items) - args.show} more")
        return 1
    print("\nNo violations.")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("setup")
    s.add_argument("--rx", required=True)
    s.add_argument("--tx", required=True)
    s.add_argument("--service-token", required=True)
    s.add_argument("--audience", required=True)
    s.add_argument("--other-client", default="other-client.apps.googleusercontent.com")
    s.add_argument("--users", type=int, default=300)
    s.add_argument("--sub-prefix", default="fault-user-")
    s.add_argument("--threads", type=int, default=6)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--out", required=True)

    s = sub.add_parser("send")
    s.add_argument("--rx", required=True)
    s.add_argument("--tx", required=True)
    s.add_argument("--state", required=True)
    s.add_argument("--results", required=True)
    s.add_argument("--count", type=int, default=10000)
    s.add_argument("--duration", type=float, default=90)
    s.add_argument("--threads", type=int, default=8)
    s.add_argument("--timeout", type=float, default=10)
    s.add_argument("--give-up", type=float, default=120, help="seconds a delivery keeps retrying")
    s.add_argument("--marker", help="file whose existence says every fault was injected")
    s.add_argument("--marker-timeout", type=float, default=180)
    s.add_argument("--seed", type=int, default=1)

    for name in ("drain", "check"):
        s = sub.add_parser(name)
        s.add_argument("--psql", required=True)
        s.add_argument("--database-url", required=True)
        if name == "drain":
            s.add_argument("--timeout", type=float, default=90)
        else:
            s.add_argument("--state", required=True)
            s.add_argument("--results", required=True)
            s.add_argument("--timeline")
            s.add_argument("--exits")
            s.add_argument("--run-started", type=float)
            s.add_argument("--show", type=int, default=8)

    args = p.parse_args()
    if args.cmd == "setup":
        cmd_setup(args)
    elif args.cmd == "send":
        cmd_send(args)
    elif args.cmd == "drain":
        cmd_drain(args)
    else:
        sys.exit(cmd_check(args))


if __name__ == "__main__":
    main()
