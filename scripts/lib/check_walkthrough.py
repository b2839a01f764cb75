#!/usr/bin/env python3
"""Runs the walkthrough that scripts/run-local.sh prints, as a user pasting it would, and checks each claim.

    check_walkthrough.py RUN_LOCAL_LOG

Reads the block from "From another terminal" to the next blank line, runs it in one bash (from the repository's
root, where the user is told to run it), and checks that what each "# → TEXT" comment says appears in the output
of that line or later (a background process, such as the webhook sink, prints after the line that caused it).
Whatever the walkthrough left running in the background is stopped afterwards. Also checks that README.md's
"Trying it locally" shows the same walkthrough, as printed with the default ports and .local (RISC_PORT,
TRANSMITTER_PORT, SINK_PORT and RISC_LOCAL_DIR in the environment name the ones this run used).
Exits 1 on any missing claim or difference.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile

CLAIM = re.compile(r"\s#\s→\s(.+)$")


def walkthrough(log: str) -> list[str]:
    lines = open(log, encoding="utf-8").read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("From another terminal"))
    block = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        block.append(line)
    # Continuation lines join the line they continue, as a shell reads them.
    joined, pending = [], ""
    for line in block:
        if line.endswith("\\"):
            pending += line[:-1]
        else:
            joined.append(pending + line)
            pending = ""
    return [line.strip() for line in joined]


def printed_lines(log: str) -> list[str]:
    lines = open(log, encoding="utf-8").read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("From another terminal"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].strip())
    return lines[start + 1 : end]


def readme_differences(log: str, root: str) -> list[str]:
    """The printed walkthrough, as it reads with the defaults, against README.md's copy of it."""
    bin_path = next(c.split()[0] for c in walkthrough(log) if c.split()[0].endswith("/risc-receiver"))
    env = os.environ
    state = env.get("RISC_LOCAL_DIR", os.path.join(root, ".local"))
    state = os.path.relpath(state, root) if state.startswith(root + "/") else state
    printed = []
    for line in printed_lines(log):
        line = line[2:].replace(bin_path, "$bin").replace(f" --transmitter http://127.0.0.1:{env.get('TRANSMITTER_PORT', '8765')}", "")
        line = line.replace(f"127.0.0.1:{env.get('RISC_PORT', '8080')}", "127.0.0.1:8080")
        line = line.replace(f"127.0.0.1:{env.get('TRANSMITTER_PORT', '8765')}", "127.0.0.1:8765")
        line = line.replace(f"127.0.0.1:{env.get('SINK_PORT', '8766')}", "127.0.0.1:8766").replace(state, ".local")
        printed.append(line.replace("--port " + env.get("SINK_PORT", "8766"), "--port 8766"))
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    section = readme[readme.index("## Trying it locally") :]
    shown = section[section.index("```sh\n") + 6 : section.index("```\n")].splitlines()
    shown = [line for line in shown if not line.startswith("bin=")]
    if shown == printed:
        return []
    import difflib

    return list(difflib.unified_diff(shown, printed, "README.md", "run-local.sh (defaults)", lineterm=""))


def main() -> int:
    commands = walkthrough(sys.argv[1])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    differences = readme_differences(sys.argv[1], root)
    if differences:
        print("\n".join(differences), file=sys.stderr)
        print("check-walkthrough: README.md's walkthrough differs from the one run-local.sh prints", file=sys.stderr)
        return 1
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as script:
        for number, command in enumerate(commands):
            script.write(f"echo '@@walkthrough {number}'\n{command}\n")
        # Then what a user would do with Ctrl-C: stop what the walkthrough started in the background (the webhook
        # sink holds the output open otherwise).
        script.write("kill $(jobs -p) 2>/dev/null; wait\n")
        path = script.name
    process = subprocess.Popen(
        ["bash", path], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        print(output, file=sys.stderr)
        print("check-walkthrough: the walkthrough did not finish within 180 s", file=sys.stderr)
        return 1
    finally:
        try:  # the webhook sink, started with & as the walkthrough says
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        os.unlink(path)

    # The output from each line's marker on.
    starts = {int(m.group(1)): m.end() for m in re.finditer(r"^@@walkthrough (\d+)$", output, re.M)}
    failures = 0
    claims = 0
    for number, command in enumerate(commands):
        match = CLAIM.search(command)
        if not match:
            continue
        claims += 1
        claim = match.group(1).strip()
        after = output[starts[number] :] if number in starts else ""
        if claim not in after:
            failures += 1
            own = after.split("\n@@walkthrough ", 1)[0].strip()
            print(f"check-walkthrough: `{command}` should print {claim!r}; it printed: {own[:600]!r}", file=sys.stderr)
    if failures:
        print(output[-4000:], file=sys.stderr)
        print(f"check-walkthrough: {failures} of {claims} claims not shown", file=sys.stderr)
        return 1
    print(f"check-walkthrough: {len(commands)} lines run as printed; all {claims} claims shown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
