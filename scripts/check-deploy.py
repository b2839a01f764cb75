#!/usr/bin/env python3
"""Checks everything in deploy/: every YAML and JSON file parses; the Kubernetes manifests validate against
the Kubernetes schemas (kubernetes-validate, strict); the compose file, Dockerfile and systemd units have
what an operator relies on; and every command line they use is accepted by the built binary.
Usage: check-deploy.py RISC_RECEIVER_BINARY"""
import configparser
import json
import re
import pathlib
import shlex
import subprocess
import sys

import kubernetes_validate
import yaml

root = pathlib.Path(__file__).resolve().parent.parent / "deploy"
binary = sys.argv[1]
problems = []
checked = 0


def problem(text):
    problems.append(text)


def accepts(arguments, where):
    """The binary parses this command line (asked with --help, so nothing runs)."""
    result = subprocess.run([binary, *arguments, "--help"], capture_output=True, text=True)
    if result.returncode != 0:
        problem(f"{where}: `risc-receiver {' '.join(arguments)}` is refused: {result.stdout}{result.stderr}")


for path in sorted(root.rglob("*")):
    if path.suffix in (".yaml", ".yml"):
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
            checked += 1
        except yaml.YAMLError as error:
            problem(f"{path}: not YAML: {error}")
            continue
        if path.parent.name == "kubernetes" and path.name != "kustomization.yaml":
            for document in documents:
                try:
                    kubernetes_validate.validate(document, "1.30.0", strict=True)
                except kubernetes_validate.ValidationError as error:
                    problem(f"{path}: {document.get('kind')}: {error.message}")
                for container in (document.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])):
                    accepts(container.get("args", []), f"{path} {container['name']}")
                    if "resources" not in container or "requests" not in container["resources"]:
                        problem(f"{path}: container {container['name']} has no resource requests")
    elif path.suffix == ".json":
        try:
            json.loads(path.read_text())
            checked += 1
        except json.JSONDecodeError as error:
            problem(f"{path}: not JSON: {error}")

compose = yaml.safe_load((root / "compose.yaml").read_text())
services = compose.get("services", {})
for name in ("postgres", "migrate", "receiver", "worker"):
    if name not in services:
        problem(f"compose.yaml: no {name} service")
for name in ("migrate", "receiver", "worker"):
    if name in services:
        accepts(services[name].get("command", []), f"compose.yaml {name}")
if "--no-worker" not in services.get("receiver", {}).get("command", []):
    problem("compose.yaml: the receiver should run serve --no-worker beside the separate worker")

dockerfile = (root / "Dockerfile").read_text()
instructions = [line.split()[0] for line in dockerfile.splitlines() if line.strip() and not line.startswith("#") and not line.startswith(" ")]
if instructions.count("FROM") < 2:
    problem("Dockerfile: not a multi-stage build")
for needed in ("USER", "HEALTHCHECK", "ENTRYPOINT"):
    if needed not in instructions:
        problem(f"Dockerfile: no {needed}")
if "--static-swift-stdlib" not in dockerfile:
    problem("Dockerfile: the standard library is not linked statically")
if "USER root" in dockerfile or "USER 0" in dockerfile:
    problem("Dockerfile: runs as root")
# The image builds the versions the tests ran with, and its runtime stage holds the binary and CA certificates.
if "Package.resolved" not in dockerfile or "--force-resolved-versions" not in dockerfile:
    problem("Dockerfile: does not build the pinned versions (Package.resolved, --force-resolved-versions)")
if "Package.resolved" in (root.parent / ".dockerignore").read_text().split():
    problem(".dockerignore: keeps Package.resolved out of the build")
runtime = dockerfile.split("\nFROM ")[-1]
installed = re.findall(r"apt-get install[^&]*", runtime)
packages = {word for command in installed for word in command.split() if not word.startswith("-")} - {"apt-get", "install", "\\"}
if packages - {"ca-certificates"}:
    problem(f"Dockerfile: the runtime stage installs more than CA certificates: {sorted(packages)}")
for line in runtime.splitlines():
    if line.startswith("HEALTHCHECK") or line.startswith("    CMD"):
        if "curl" in line:
            problem("Dockerfile: the health check needs curl; the image carries only risc-receiver")
healthcheck = re.search(r'CMD \[(.*)\]', runtime.split("HEALTHCHECK", 1)[-1])
if healthcheck:
    accepts(json.loads(f"[{healthcheck.group(1)}]")[1:], "Dockerfile HEALTHCHECK")
for name in ("receiver", "worker"):
    test = services.get(name, {}).get("healthcheck", {}).get("test", [])
    if test:
        if "curl" in " ".join(test):
            problem(f"compose.yaml {name}: the health check needs curl; the image carries only risc-receiver")
        elif test[:2] == ["CMD", "/usr/local/bin/risc-receiver"]:
            accepts(test[2:], f"compose.yaml {name} healthcheck")

units = sorted((root / "systemd").glob("*.service"))
if {u.name for u in units} != {"risc-receiver.service", "risc-receiver-worker.service", "risc-receiver-migrate.service"}:
    problem(f"systemd: expected a unit for the receiver, the worker and migrate, found {[u.name for u in units]}")
for unit in units:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    try:
        parser.read_string(unit.read_text())
        checked += 1
    except configparser.Error as error:
        problem(f"{unit}: not a unit file: {error}")
        continue
    for section in ("Unit", "Service"):
        if section not in parser:
            problem(f"{unit}: no [{section}]")
    exec_start = parser.get("Service", "ExecStart", fallback=None)
    if not exec_start:
        problem(f"{unit}: no ExecStart")
        continue
    command = shlex.split(exec_start)
    if not command[0].endswith("/risc-receiver"):
        problem(f"{unit}: ExecStart does not run risc-receiver")
    accepts(command[1:], str(unit))
    if parser.get("Service", "User", fallback="root") == "root":
        problem(f"{unit}: runs as root")

for text in problems:
    print("PROBLEM", text)
print(f"checked {checked} files in deploy/, {len(problems)} problems")
sys.exit(1 if problems else 0)
