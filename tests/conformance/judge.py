"""The providers' own SDKs judge NeverMiss's stand-ins and adapters (issue 20).

Run inside the pinned virtual environment `make test` creates (tests/conformance/requirements.txt):

  judge.py fixtures            every fixture of tests/fixtures/manifest.json validates as the SDK
                               model the manifest names, with no field the model does not declare
  judge.py values [--write]    every value of every status / stop-reason / event-type field the
                               adapters read, enumerated from the SDKs' `Literal` types, equals
                               tests/conformance/sdk_values.json (the file the Rust conformance test
                               reads to check each adapter table); --write rewrites it
  judge.py log FILE            every body the Rust stand-ins served and the tests sent (the JSONL log
                               the harness appends to) validates as the SDK model of its route
  judge.py upgrade             moves every pin of requirements.txt to the newest version on PyPI
  judge.py webhooks BIN        every webhook event type of each SDK's union, signed with the
                               `standardwebhooks` library, is sent to a running `BIN serve`: each is
                               answered 200 applied or ignored; prints which are acted on

A model is judged strictly: a validation error fails, and so does a field the model does not
declare at any level (pydantic's `model_extra`), except in the objects the SDK itself declares open
(`__pydantic_extra__` in the class, e.g. Replicate's `metrics`). fal's client has no response models
(its status and error readings are plain functions): its bodies are read with those functions
(`_BaseRequestHandle._parse_status`, `_raise_for_status`), which judge shape, not extra fields.
"""

from __future__ import annotations

import base64
import importlib
import inspect
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import typing
import urllib.error
import urllib.request
from datetime import datetime
from importlib import metadata
from pathlib import Path

import pydantic

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
MANIFEST = FIXTURES / "manifest.json"
VALUES = ROOT / "tests" / "conformance" / "sdk_values.json"
SDKS = ["openai", "anthropic", "replicate", "fal-client", "standardwebhooks"]


# ----- models -----

def resolve(spec: str):
    """`module:Name` (a model or a type alias such as a union), or `page:module:Page|module:Item`."""
    if spec.startswith("page:"):
        page, item = spec[len("page:"):].split("|")
        return resolve(page)[resolve(item)]
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


_adapters: dict[str, pydantic.TypeAdapter] = {}


def adapter(spec: str) -> pydantic.TypeAdapter:
    if spec not in _adapters:
        _adapters[spec] = pydantic.TypeAdapter(resolve(spec))
    return _adapters[spec]


def undeclared(obj, path: str = "$"):
    """The fields a validated object holds that its model does not declare, at any level."""
    if isinstance(obj, pydantic.BaseModel):
        cls = type(obj)
        # Only the SDK's own model classes count (its base class declares extras for all).
        open_by_design = "__pydantic_extra__" in vars(cls).get("__annotations__", {})
        if obj.model_extra and not open_by_design:
            yield f"{path}: {sorted(obj.model_extra)} not declared by {cls.__name__}"
        for name in cls.model_fields:
            yield from undeclared(getattr(obj, name, None), f"{path}.{name}")
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            yield from undeclared(item, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield from undeclared(item, f"{path}.{key}")


def judge(spec: str, body) -> list[str]:
    """What is wrong with `body` as an instance of `spec` (empty: nothing)."""
    if spec.startswith("fal:"):
        return judge_fal(spec[len("fal:"):], body)
    try:
        value = adapter(spec).validate_python(body)
    except pydantic.ValidationError as e:
        return condensed(e.errors())
    return list(undeclared(value))


def condensed(errors: list[dict]) -> list[str]:
    """A union's errors, only for the members whose tag matched (pydantic tries every member of
    the SDKs' unions, whose discriminator is their own, and reports them all)."""
    def member(err):
        return next((part for part in err["loc"] if isinstance(part, str) and part[:1].isupper()), None)

    mismatched = {member(e) for e in errors if e["loc"] and e["loc"][-1] == "type" and e["msg"].startswith("Input should be")}
    kept = [e for e in errors if member(e) is None or member(e) not in mismatched]
    if not kept:
        return ["no member of the union has this body's type"]
    return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in kept]


def judge_fal(kind: str, body) -> list[str]:
    """fal's client reads a status with `_parse_status` and an error with `_raise_for_status`."""
    from fal_client import client as fal

    if kind == "status":
        handle = fal.SyncRequestHandle(request_id="r", response_url="u", status_url="u", cancel_url="u", client=None)
        try:
            handle._parse_status(body)
        except (KeyError, ValueError, TypeError) as e:
            return [f"fal_client cannot read this status: {e!r}"]
        return []
    if kind in ("result", "webhook"):
        return [] if isinstance(body, dict) else ["not a JSON object"]
    if kind == "cancel":
        # fal-client's `cancel` reads only the HTTP status (`_raise_for_status`), never the body.
        return [] if isinstance(body, dict) else ["not a JSON object"]
    return [f"unknown fal body kind {kind}"]


# ----- fixtures -----

def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def cmd_fixtures() -> int:
    m = manifest()
    failures, n = [], 0
    listed = set(m["fixtures"])
    on_disk = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.json") if p != MANIFEST}
    for missing in sorted(on_disk - listed):
        failures.append(f"{missing}: a fixture the manifest does not name (give it its SDK model)")
    for name, spec in sorted(m["fixtures"].items()):
        path = FIXTURES / name
        if not path.exists():
            failures.append(f"{name}: named by the manifest, not on disk")
            continue
        n += 1
        for problem in judge(spec, json.loads(path.read_text())):
            failures.append(f"{name} as {spec}: {problem}")
    report("fixtures", n, failures)
    return 1 if failures else 0


def report(what: str, n: int, failures: list[str]) -> None:
    if failures:
        print(f"conformance: {what}: {len(failures)} problem(s) in {n} checked:")
        for f in failures:
            print(f"  - {f}")
    else:
        print(f"conformance: {what}: {n} checked against the SDKs, all conform")


# ----- values -----

def literal_values(tp) -> list[str]:
    """The strings of a `Literal` (through Optional, Annotated and unions of literals)."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return [a for a in typing.get_args(tp) if isinstance(a, str)]
    if origin in (typing.Union, typing.Annotated) or str(origin) in ("typing.Union", "types.UnionType"):
        return [v for a in typing.get_args(tp) for v in literal_values(a)]
    try:
        import types
        if isinstance(tp, types.UnionType):
            return [v for a in typing.get_args(tp) for v in literal_values(a)]
    except AttributeError:
        pass
    return []


def field_literal(spec: str, field: str) -> list[str]:
    return literal_values(resolve(spec).model_fields[field].annotation)


def union_tags(spec: str, tag: str = "type") -> list[str]:
    """The `tag` literal of every member of a discriminated union."""
    tp = resolve(spec)
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return [v for member in typing.get_args(tp) for v in field_literal(f"{member.__module__}:{member.__name__}", tag)]


def fal_statuses() -> list[str]:
    from fal_client import client as fal

    return re.findall(r'data\["status"\] == "([A-Z_]+)"', inspect.getsource(fal._BaseRequestHandle._parse_status))


AB = "anthropic.types.beta"
OA = "openai.types"
# Each field an adapter reads, by the key its table carries (providers/vocabulary.rs): where the SDK
# says its values.
FIELDS = {
    "anthropic.batch.processing_status": lambda: field_literal("anthropic.types.messages:MessageBatch", "processing_status"),
    "anthropic.session.status": lambda: field_literal(f"{AB}:BetaManagedAgentsSession", "status"),
    "anthropic.session_event.stop_reason": lambda: union_tags(f"{AB}.sessions.beta_managed_agents_session_status_idle_event:StopReason"),
    "anthropic.session_event.type": lambda: [t for t in union_tags(f"{AB}.sessions:BetaManagedAgentsSessionEvent") if t.startswith("session.status_")],
    "anthropic.webhook.type": lambda: union_tags(f"{AB}:BetaWebhookEventData"),
    "openai.webhook.type": lambda: union_tags(f"{OA}.webhooks:UnwrapWebhookEvent"),
    "openai.response.status": lambda: field_literal(f"{OA}.responses:Response", "status"),
    "openai.batch.status": lambda: field_literal(f"{OA}:Batch", "status"),
    "openai.fine_tuning_job.status": lambda: field_literal(f"{OA}.fine_tuning:FineTuningJob", "status"),
    "openai.video.status": lambda: field_literal(f"{OA}:Video", "status"),
    "openai.agent_session.status": lambda: field_literal(f"{OA}.beta.agent_session:AgentSession", "status"),
    "openai.turn.status": lambda: field_literal(f"{OA}.beta.agents.sessions.turn:Turn", "status"),
    "replicate.prediction.status": lambda: field_literal("replicate.types:Prediction", "status"),
    "replicate.training.status": lambda: field_literal("replicate.types:TrainingGetResponse", "status"),
    "fal.status": fal_statuses,
}


def sdk_values() -> dict:
    return {
        "about": "Every value of every field the adapters read, from the SDKs' Literal types "
        "(tests/conformance/judge.py values --write, run by make sdk-upgrade). The Rust test "
        "conformance::every_sdk_value_has_a_mapping fails on a value an adapter table lacks.",
        "sdk_versions": {p: metadata.version(p) for p in SDKS},
        "fields": {key: sorted(set(f())) for key, f in FIELDS.items()},
    }


def cmd_values(write: bool) -> int:
    now = sdk_values()
    if write:
        VALUES.write_text(json.dumps(now, indent=2) + "\n")
        print(f"conformance: wrote {VALUES.relative_to(ROOT)} ({sum(map(len, now['fields'].values()))} values of {len(now['fields'])} fields)")
        return 0
    kept = json.loads(VALUES.read_text()) if VALUES.exists() else {"fields": {}, "sdk_versions": {}}
    problems = []
    for key, values in now["fields"].items():
        old = set(kept["fields"].get(key, []))
        new, gone = sorted(set(values) - old), sorted(old - set(values))
        if new:
            problems.append(f"{key}: new in the SDK: {', '.join(new)}")
        if gone:
            problems.append(f"{key}: no longer in the SDK: {', '.join(gone)}")
        if not values:
            problems.append(f"{key}: the SDK gives no values (the field moved? fix FIELDS in judge.py)")
    if kept.get("sdk_versions") != now["sdk_versions"]:
        problems.append(f"SDK versions {now['sdk_versions']} differ from those the file was written with {kept.get('sdk_versions')}")
    if problems:
        print("conformance: values: the SDKs differ from tests/conformance/sdk_values.json:")
        for p in problems:
            print(f"  - {p}")
        print("  rewrite it with `make sdk-values`, then map every new value in its adapter table")
        return 1
    print(f"conformance: values: {sum(map(len, now['fields'].values()))} values of {len(now['fields'])} fields, as the SDKs say")
    return 0


# ----- the stand-ins' log -----

def route_model(routes: list[dict], method: str, path: str) -> str | None:
    for r in routes:
        if r["method"] == method and re.fullmatch(r["pattern"], path):
            return r["model"]
    return None


def cmd_log(path: str) -> int:
    m = manifest()
    failures, checked, off_spec, skipped = [], 0, {}, 0
    seen = set()
    lines = Path(path).read_text().splitlines() if Path(path).exists() else []
    if not lines:
        print(f"conformance: log: {path} is empty or missing: did the Rust suite run?")
        return 1
    for line in lines:
        entry = json.loads(line)
        key = json.dumps(entry, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        if entry.get("off_spec"):
            off_spec[entry["off_spec"]] = off_spec.get(entry["off_spec"], 0) + 1
            continue
        if entry["kind"] == "served":
            if not (200 <= entry["status"] < 300) or entry.get("body") is None:
                skipped += 1
                continue
            spec = route_model(m["routes"], entry["method"], entry["path"])
            where = f"served {entry['method']} {entry['path']}"
        else:
            spec = m["webhooks"].get(entry["provider"])
            where = f"sent to /hooks/{entry['provider']}"
        if spec is None:
            if entry["kind"] == "sent" and entry["provider"] == "generic":
                skipped += 1
                continue
            if entry["kind"] == "served" and any(re.fullmatch(p, entry["path"]) for p in m["not_providers"]):
                skipped += 1
                continue
            failures.append(f"{where}: no SDK model names this route in tests/fixtures/manifest.json")
            continue
        if isinstance(spec, dict):  # a webhook whose model depends on the body (Replicate)
            value = str(dig(entry["body"], spec["key"]) or "")
            spec = next((m for part, m in spec["contains"].items() if part in value), spec["default"])
        checked += 1
        for problem in judge(spec, entry["body"]):
            failures.append(f"{where} as {spec}: {problem}\n      body: {json.dumps(entry['body'])[:300]}")
    report(f"log ({checked} distinct bodies; {skipped} errors, non-JSON or the generic provider's, not the SDKs' business)", checked, failures)
    if off_spec:
        print(f"conformance: log: {sum(off_spec.values())} bodies off the SDKs' spec on purpose:")
        for why, n in sorted(off_spec.items()):
            print(f"  - {n} x {why}")
    return 1 if failures else 0


def dig(body, dotted: str):
    for part in dotted.split("."):
        if not isinstance(body, dict):
            return None
        body = body.get(part)
    return body


# ----- every webhook type, signed, to a running serve -----

def sample(tp, name: str, ids: dict):
    """The least instance of a type that validates: required fields only."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return sample(typing.get_args(tp)[0], name, ids)
    if origin is typing.Literal:
        return typing.get_args(tp)[0]
    args = typing.get_args(tp)
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        if type(None) in args:
            return None
        return sample(args[0], name, ids)
    if origin in (list, typing.List):
        return []
    if origin in (dict, typing.Dict):
        return {}
    if tp is str:
        return ids.get(name, f"{name}_judge")
    if tp is bool:
        return False
    if tp in (int, float):
        return int(time.time())
    if tp is datetime:
        return datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if inspect.isclass(tp) and issubclass(tp, pydantic.BaseModel):
        return {
            (f.alias or n): sample(f.annotation, n, ids)
            for n, f in tp.model_fields.items()
            if f.is_required()
        }
    return None


def members(spec: str):
    tp = resolve(spec)
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return typing.get_args(tp)


OPENAI_ID_PREFIX = {"response.": "resp_", "batch.": "batch_", "fine_tuning.job.": "ftjob-", "eval.run.": "evalrun_", "video.": "video_"}


def webhook_bodies():
    """(provider, event type, body) for every member of each SDK's webhook union."""
    from anthropic.types.beta import BetaWebhookEvent

    for n, member in enumerate(members(f"{AB}:BetaWebhookEventData")):
        kind = field_literal(f"{member.__module__}:{member.__name__}", "type")[0]
        data = sample(member, "data", {"id": f"sesn_judge{n:02}" if kind.startswith("session.") else f"judge{n:02}"})
        body = sample(BetaWebhookEvent, "event", {"id": f"wevt_{kind}"})
        body["data"] = data
        yield "anthropic", kind, body
    for n, member in enumerate(members(f"{OA}.webhooks:UnwrapWebhookEvent")):
        kind = field_literal(f"{member.__module__}:{member.__name__}", "type")[0]
        prefix = next((p for k, p in OPENAI_ID_PREFIX.items() if kind.startswith(k)), "judge_")
        body = sample(member, "event", {"id": f"{prefix}judge{n:02}"})
        body["id"] = f"evt_{kind}"
        yield "openai", kind, body
    from replicate.types import Prediction

    for status in field_literal("replicate.types:Prediction", "status"):
        body = sample(Prediction, "prediction", {"id": f"judge{status}", "model": "owner/model", "version": "hidden"})
        body.update(status=status, urls={"cancel": "https://api.replicate.com/v1/predictions/x/cancel", "get": f"https://api.replicate.com/v1/predictions/judge{status}", "web": "https://replicate.com/p/x"})
        yield "replicate", f"prediction {status}", body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: bytes, headers: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"content-type": "application/json", **headers}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def cmd_webhooks(binary: str) -> int:
    from standardwebhooks import Webhook

    secret = "whsec_" + base64.b64encode(b"conformance-judge-secret-key-32b").decode()
    receiver, api = free_port(), free_port()
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: polls fail, answers do not
    env = {**os.environ, "NEVERMISS_POLL_INTERVAL": "3600"}
    for p in ("REPLICATE", "OPENAI", "ANTHROPIC"):
        env[f"NEVERMISS_{p}_WEBHOOK_SECRET"] = secret
        env[f"NEVERMISS_{p}_BASE_URL"] = dead
    with tempfile.TemporaryDirectory() as data:
        child = subprocess.Popen(
            [binary, "serve", "--data-dir", data, "--receiver-addr", f"127.0.0.1:{receiver}", "--api-addr", f"127.0.0.1:{api}"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(Path(data) / "serve.log", "w"),
        )
        try:
            return send_all(f"http://127.0.0.1:{receiver}", Webhook(secret), child, Path(data) / "serve.log")
        finally:
            child.terminate()
            child.wait(timeout=30)


def send_all(base: str, signer, child, log: Path) -> int:
    deadline = time.time() + 120
    while True:
        try:
            post(f"{base}/hooks/openai", b"{}", {})
            break
        except OSError:
            if child.poll() is not None or time.time() > deadline:
                print(f"conformance: webhooks: serve did not start:\n{log.read_text()[-2000:]}")
                return 1
            time.sleep(0.2)
    failures, acted, ignored = [], {}, {}
    for n, (provider, kind, body) in enumerate(webhook_bodies()):
        spec = manifest()["webhooks"][provider]
        spec = spec["default"] if isinstance(spec, dict) else spec
        problems = judge(spec, body)
        if problems:
            failures.append(f"{provider} {kind}: the judge's own body does not validate: {problems}")
            continue
        raw = json.dumps(body)
        msg_id = f"msg_judge_{n}"
        stamp = datetime.utcnow()
        signature = signer.sign(msg_id, stamp, raw)
        headers = {"webhook-id": msg_id, "webhook-timestamp": str(int(stamp.timestamp())), "webhook-signature": signature}
        status, answer = post(f"{base}/hooks/{provider}", raw.encode(), headers)
        outcome = answer.get("outcome")
        if status != 200 or outcome not in ("applied", "ignored"):
            failures.append(f"{provider} {kind}: answered {status} {answer} (expected 200 applied or ignored)")
        else:
            (acted if outcome == "applied" else ignored).setdefault(provider, []).append(kind)
    # The OpenAI SDK accepts a signature entry without its `v1,` prefix: so must NeverMiss.
    raw = json.dumps(next(b for p, k, b in webhook_bodies() if p == "openai" and k == "response.completed")).replace("resp_judge", "resp_bare")
    stamp = datetime.utcnow()
    bare = signer.sign("msg_judge_bare", stamp, raw).split(",", 1)[1]
    status, answer = post(f"{base}/hooks/openai", raw.encode(), {"webhook-id": "msg_judge_bare", "webhook-timestamp": str(int(stamp.timestamp())), "webhook-signature": bare})
    if status != 200:
        failures.append(f"openai: a signature without `v1,` (which openai-python accepts) answered {status} {answer}")
    for provider in sorted(set(acted) | set(ignored)):
        print(f"conformance: webhooks: {provider}: acted on {len(acted.get(provider, []))}: {', '.join(acted.get(provider, []))}")
        print(f"conformance: webhooks: {provider}: answered ignored {len(ignored.get(provider, []))}: {', '.join(ignored.get(provider, []))}")
    total = sum(map(len, acted.values())) + sum(map(len, ignored.values()))
    report("webhooks (every type of each SDK's union, signed by standardwebhooks, sent to serve)", total + len(failures), failures)
    return 1 if failures else 0


# ----- upgrading the pins -----

REQUIREMENTS = ROOT / "tests" / "conformance" / "requirements.txt"
# Packages whose newest typed release is a pre-release (replicate's 2.x line).
PRE_RELEASES = {"replicate"}


def cmd_upgrade() -> int:
    """Moves every pin of requirements.txt to the newest version on PyPI (`pip index versions`)."""
    lines, changed = [], []
    for line in REQUIREMENTS.read_text().splitlines():
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if not m:
            lines.append(line)
            continue
        name, old = m.groups()
        args = [sys.executable, "-m", "pip", "index", "versions", name, "--disable-pip-version-check"]
        if name in PRE_RELEASES:
            args.append("--pre")
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        newest = re.search(rf"^{re.escape(name)} \(([^)]+)\)", out, re.M).group(1)
        lines.append(f"{name}=={newest}")
        if newest != old:
            changed.append(f"{name} {old} -> {newest}")
    REQUIREMENTS.write_text("\n".join(lines) + "\n")
    print("conformance: pins: " + ("; ".join(changed) if changed else "every SDK is at its newest version"))
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "fixtures":
        return cmd_fixtures()
    if command == "values":
        return cmd_values("--write" in rest)
    if command == "log":
        return cmd_log(rest[0])
    if command == "webhooks":
        return cmd_webhooks(rest[0])
    if command == "upgrade":
        return cmd_upgrade()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
