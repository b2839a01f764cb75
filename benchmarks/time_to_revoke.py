"""Time-to-revoke: for each user, POST a pre-signed sessions-revoked SET, then poll GET /v1/session with
that user's session until it answers 401; the time from the 202 to the first 401 is one sample.
Also measures one plain session check per user beforehand (the baseline round trip).
Usage: time_to_revoke.py RECEIVER_URL TOKENS_FILE [INTERVAL_SECONDS]
With an interval, the SETs are sent on a fixed schedule, one every INTERVAL_SECONDS (a burst beside other load).
A SET for user load-user-K revokes the session with token bench-session-(K+1)."""
import base64
import http.client
import json
import sys
import time
from urllib.parse import urlparse

url = urlparse(sys.argv[1])
tokens = [line.strip() for line in open(sys.argv[2]) if line.strip()]
interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
sets = http.client.HTTPConnection(url.hostname, url.port)
checks = http.client.HTTPConnection(url.hostname, url.port)


def check(session):
    checks.request("GET", "/v1/session", headers={"Authorization": f"Bearer {session}"})
    response = checks.getresponse()
    response.read()
    return response.status


baseline, samples, polls = [], [], 0
def subject(token):
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    (event,) = claims["events"].values()
    return event["subject"]["sub"]


started = time.perf_counter()
for i, token in enumerate(tokens):
    if interval:
        time.sleep(max(0.0, started + i * interval - time.perf_counter()))
    session = f"bench-session-{int(subject(token).removeprefix('load-user-')) + 1}"
    start = time.perf_counter()
    assert check(session) == 200, f"session {session} is not valid before its event"
    baseline.append(time.perf_counter() - start)
    sets.request("POST", "/risc/events", body=token, headers={"Content-Type": "application/secevent+jwt"})
    response = sets.getresponse()
    response.read()
    assert response.status == 202, f"SET {i} answered {response.status}"
    accepted = time.perf_counter()
    while True:
        polls += 1
        if check(session) == 401:
            samples.append(time.perf_counter() - accepted)
            break
        if time.perf_counter() - accepted > 10:
            sys.exit(f"session {session} was still valid 10 s after its SET was accepted")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))] * 1000


print(f"RESULT users={len(samples)} p50_ms={pct(samples, 50):.2f} p99_ms={pct(samples, 99):.2f} "
      f"max_ms={max(samples) * 1000:.2f} check_p50_ms={pct(baseline, 50):.3f} check_p99_ms={pct(baseline, 99):.3f} "
      f"polls_per_user={polls / len(samples):.1f}")
