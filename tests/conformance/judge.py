"""The providers' own SDKs judge NeverMiss's stand-ins and adapters.

Run inside the pinned virtual environment `make test` creates (tests/conformance/requirements.txt):

  judge.py fixtures            every fixture of tests/fixtures/manifest.json validates as the SDK
                               model the manifest names, with no field the model does not declare
  judge.py values [--write]    every value of every status / stop-reason / event-type field the
                               adapters read, enumerated from the SDKs' `Literal` types, equals
                               tests/conformance/sdk_values.json (the file the Rust conformance test
                               reads to check each adapter table); --write rewrites it. And every
                               status value of each shipped recipe's SDK (crates/providers/recipes,
                               read with tomllib) is mapped by that recipe's [states] table
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

The shipped recipes' providers are judged the same way where their SDK has models
(groq, mistralai, together, fireworks-ai: pydantic; google-genai: the REST shapes read through the
SDK's own converters, `_BatchJob_from_mldev`, `_GenerateVideosOperation_from_mldev`, then its
models). Where it has none, the suite says so and judges by what the SDK reads or the docs list:
huggingface_hub's `JobInfo` is a dataclass (a body must construct it, with no field its
constructor does not read), runpod returns plain dicts (statuses from `endpoint/helpers.py` and
the docs), Cursor publishes no SDK (its API reference's fields and statuses).
"""

from __future__ import annotations

import ast
import base64
import importlib
import importlib.util
import inspect
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
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
RECIPES = ROOT / "crates" / "providers" / "recipes"
# The shipped recipes' providers' SDKs.
RECIPE_SDKS = ["google-genai", "together", "groq", "mistralai", "fireworks-ai", "runpod", "huggingface_hub"]
SDKS = ["openai", "anthropic", "replicate", "fal-client", "standardwebhooks", *RECIPE_SDKS]


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
    for prefix, untyped in UNTYPED.items():
        if spec.startswith(prefix):
            return untyped(spec[len(prefix):], body)
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
        "recipes": recipe_values(),
    }


def drift(now: dict[str, list[str]], kept: dict[str, list[str]], what: str, fix: str) -> list[str]:
    """What the SDKs say now that the values file does not keep, and the reverse, per field."""
    problems = []
    for key, values in now.items():
        old = set(kept.get(key, []))
        new, gone = sorted(set(values) - old), sorted(old - set(values))
        if new:
            problems.append(f"{what}{key}: new in the SDK: {', '.join(new)}")
        if gone:
            problems.append(f"{what}{key}: no longer in the SDK: {', '.join(gone)}")
        if not values:
            problems.append(f"{what}{key}: the SDK gives no values ({fix})")
    return problems


def cmd_values(write: bool) -> int:
    now = sdk_values()
    if write:
        VALUES.write_text(json.dumps(now, indent=2) + "\n")
        print(f"conformance: wrote {VALUES.relative_to(ROOT)} ({sum(map(len, now['fields'].values()))} values of {len(now['fields'])} fields)")
        return 0
    kept = json.loads(VALUES.read_text()) if VALUES.exists() else {"fields": {}, "sdk_versions": {}}
    problems = drift(now["fields"], kept["fields"], "", "the field moved? fix FIELDS in judge.py")
    problems += drift(now["recipes"], kept.get("recipes", {}), "recipe ", "fix RECIPE_VALUES in judge.py")
    if kept.get("sdk_versions") != now["sdk_versions"]:
        problems.append(f"SDK versions {now['sdk_versions']} differ from those the file was written with {kept.get('sdk_versions')}")
    if problems:
        print("conformance: values: the SDKs differ from tests/conformance/sdk_values.json:")
        for p in problems:
            print(f"  - {p}")
        print("  rewrite it with `make sdk-values`, then map every new value in its adapter table")
        return 1
    print(f"conformance: values: {sum(map(len, now['fields'].values()))} values of {len(now['fields'])} fields, as the SDKs say")
    return cmd_recipes(now["recipes"])


def cmd_recipes(values: dict[str, list[str]]) -> int:
    """Every status value of each recipe's SDK is mapped by the recipe's [states] table."""
    for note in recipe_notes():
        print(f"conformance: {note}")
    recipes = shipped_recipes()
    problems = unmapped(recipes, values)
    report(f"recipes ({len(recipes)} shipped, {sum(map(len, values.values()))} SDK status values)", len(recipes), problems)
    return 1 if problems else 0


# ----- the shipped recipes -----

def sdk_source(package: str, relative: str) -> str:
    """A file of an installed package, read without importing it (runpod's `__init__` imports its
    whole serverless worker, none of which the judge needs)."""
    spec = importlib.util.find_spec(package)
    return (Path(spec.origin).parent / relative).read_text()


def gemini_batch_states() -> list[str]:
    """The Gemini API's batch states, as google-genai renames them (`t_job_state`): each must
    become a member of the SDK's `JobState` enum."""
    from google.genai import _transformers as t, types

    wire = re.findall(r"state == '(BATCH_STATE_\w+)'", inspect.getsource(t.t_job_state))
    members = {m.value for m in types.JobState}
    strays = [w for w in wire if t.t_job_state(w) not in members]
    if strays:
        raise ValueError(f"t_job_state renames {strays} to no member of JobState")
    return wire


def runpod_statuses() -> list[str]:
    """runpod has no status type: its ends from `endpoint/helpers.py` (`is_completed`), and the
    two states before an end that its docs list (a job answered by `/run` is IN_QUEUE)."""
    tree = ast.parse(sdk_source("runpod", "endpoint/helpers.py"))
    is_completed = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "is_completed")
    ends = [c.value for c in ast.walk(is_completed) if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.isupper()]
    return ["IN_QUEUE", "IN_PROGRESS", *ends]


def huggingface_stages() -> list[str]:
    from huggingface_hub import JobStage

    return [s.value for s in JobStage]


# Cursor publishes no SDK: its API reference's enum (GET /v0/agents/{id}, `status`:
# https://cursor.com/docs/cloud-agent/api/v0.md).
CURSOR_STATUSES = ["RUNNING", "FINISHED", "ERROR", "CREATING", "EXPIRED"]

FW = "fireworks.types"
# Each shipped recipe: where its SDK says the values of the status it reads, and, when the SDK has
# no typed models, why the values come from elsewhere (said in the suite's output).
RECIPE_VALUES = {
    "gemini": (gemini_batch_states, None),
    "groq": (lambda: field_literal("groq.types:BatchRetrieveResponse", "status"), None),
    "mistral": (lambda: field_literal("mistralai.client.models:BatchJob", "status"), None),
    "together": (
        lambda: field_literal("together.types:FinetuneResponse", "status")
        + [s.value for s in resolve("together.types.finetune:FinetuneJobStatus")]
        + field_literal("together.types:BatchJob", "status"),
        None,
    ),
    "fireworks": (
        lambda: [
            v
            for model in ("BatchInferenceJob", "SupervisedFineTuningJob", "DpoJob", "ReinforcementFineTuningJob")
            for v in field_literal(f"{FW}:{model}", "state")
        ],
        None,
    ),
    "huggingface": (huggingface_stages, "huggingface_hub's JobInfo is a dataclass, not a typed model: stages from its JobStage enum"),
    "runpod": (runpod_statuses, "runpod returns plain dicts (no typed models): statuses from endpoint/helpers.py is_completed and the docs' IN_QUEUE, IN_PROGRESS"),
    "cursor": (lambda: list(CURSOR_STATUSES), "Cursor publishes no SDK: statuses from its API reference (GET /v0/agents/{id})"),
}


def shipped_recipes() -> dict[str, dict]:
    """Every shipped recipe, by its name, as tomllib reads it."""
    return {r["name"]: r for r in (tomllib.loads(p.read_text()) for p in sorted(RECIPES.glob("*.toml")))}


def recipe_values() -> dict[str, list[str]]:
    return {name: sorted(set(f())) for name, (f, _) in RECIPE_VALUES.items()}


def unmapped(recipes: dict[str, dict], values: dict[str, list[str]]) -> list[str]:
    """What the recipes' tables miss of their SDKs' values, and recipes no SDK judges."""
    problems = []
    for name, recipe in recipes.items():
        if name not in values:
            problems.append(f"recipe {name}: no SDK judges it (add it to RECIPE_VALUES in judge.py)")
            continue
        table = recipe.get("states", {})
        for value in values[name]:
            if value not in table:
                problems.append(f"recipe {name}: the SDK's status {value!r} is not mapped by [states] in crates/providers/recipes/{name}.toml")
    for name in sorted(set(values) - set(recipes)):
        problems.append(f"recipe {name}: judge.py names it, crates/providers/recipes/ has no such recipe")
    return problems


def recipe_notes() -> list[str]:
    return [f"recipe {name}: {note}" for name, (_, note) in RECIPE_VALUES.items() if note]


# The bodies of providers whose SDK has no typed models, or whose REST shapes its converters read.

def keys_read(function) -> set[tuple[str, ...]]:
    """The paths a google-genai converter reads (`getv(from_object, ['metadata', 'state'])`)."""
    paths = re.findall(r"getv\(\s*from_object,\s*\[([^\]]*)\]", inspect.getsource(function))
    return {tuple(re.findall(r"'([^']+)'", p)) for p in paths}


def unread(body: dict, read: set[tuple[str, ...]], envelope: set[str], where: str = "$") -> list[str]:
    """The fields of `body` at the first two levels that the converter does not read (a field it
    reads whole, e.g. `metadata` of an operation, covers what is below it), but for the
    google.longrunning.Operation envelope's own fields (`envelope`)."""
    problems = []
    for key, value in body.items():
        if key in envelope or (key,) in read:
            continue
        below = {p[1:] for p in read if p[0] == key and len(p) > 1}
        if not below:
            problems.append(f"{where}.{key}: a field google-genai's converter does not read")
        elif isinstance(value, dict):
            problems.extend(f"{where}.{key}.{k}: a field google-genai's converter does not read" for k in value if (k,) not in below and k != "@type")
    return problems


def judge_genai(kind: str, body) -> list[str]:
    from google.genai import batches, types
    from google.genai import _operations_converters as ops

    if not isinstance(body, dict):
        return ["not a JSON object"]
    try:
        if kind == "batch":
            problems = unread(body, keys_read(batches._BatchJob_from_mldev), {"done", "response", "error"})
            job = types.BatchJob._from_response(response=batches._BatchJob_from_mldev(body), kwargs={})
            if job.state is None or job.state.value not in {m.value for m in types.JobState}:
                problems.append(f"metadata.state {body.get('metadata', {}).get('state')!r} is no JobState once renamed")
            return problems
        if kind == "batch_list":
            # batches.list's page (`_ListBatchJobsResponse_from_mldev`), each operation a batch.
            problems = unread(body, keys_read(batches._ListBatchJobsResponse_from_mldev), set())
            for i, operation in enumerate(body.get("operations") or []):
                problems += [f"$.operations[{i}]: {p}" for p in judge_genai("batch", operation)]
            return problems
        if kind == "video_operation":
            problems = unread(body, keys_read(ops._GenerateVideosOperation_from_mldev), {"response"})
            video = (body.get("response") or {}).get("generateVideoResponse") or {}
            problems += unread(video, keys_read(ops._GenerateVideosResponse_from_mldev), set(), "$.response.generateVideoResponse")
            operation = types.GenerateVideosOperation.from_api_response(body, is_vertex_ai=False)
            if operation.done and not (operation.error or operation.response):
                problems.append("done, with neither error nor response")
            return problems
        if kind == "webhook":
            # The SDK has no model of a delivery's body (nothing under _gaos/ parses an event): its
            # event type is the SDK's (the webhook resource's `WebhookSubscribedEvent`), the rest
            # the docs' thin shape, {type, data: {id, ...}}.
            problems = [f"$.{k}: not a field of the docs' event" for k in body if k not in {"type", "data"}]
            if body.get("type") not in genai_webhook_events():
                problems.append(f"$.type {body.get('type')!r}: none of google-genai's WebhookSubscribedEvent {genai_webhook_events()}")
            if not isinstance((body.get("data") or {}).get("id"), str):
                problems.append("$.data.id: missing (the job's name)")
            return problems
    except (pydantic.ValidationError, ValueError, TypeError, AttributeError) as e:
        return [f"google-genai cannot read this {kind}: {e!r}"[:400]]
    return [f"unknown genai body kind {kind}"]


def genai_webhook_events() -> list[str]:
    """The event types of google-genai's webhook resource (_gaos/types/webhooks/webhook.py)."""
    import typing
    from google.genai._gaos.types.webhooks.webhook import WebhookSubscribedEvent

    literal = next(a for a in typing.get_args(WebhookSubscribedEvent) if typing.get_origin(a) is typing.Literal)
    return list(typing.get_args(literal))


RUNPOD_FIELDS = {"id", "status", "delayTime", "executionTime", "workerId", "output", "error", "retries"}


def judge_runpod(kind: str, body) -> list[str]:
    """runpod's `Job` reads `status` and `output` of a plain dict (endpoint/runner.py)."""
    if kind != "status" or not isinstance(body, dict):
        return ["not a RunPod status object"]
    problems = [f"$.{k}: not a field of RunPod's status answer (the docs' {sorted(RUNPOD_FIELDS)})" for k in body if k not in RUNPOD_FIELDS]
    if not isinstance(body.get("id"), str):
        problems.append("$.id: missing")
    if body.get("status") not in runpod_statuses():
        problems.append(f"$.status {body.get('status')!r}: none of {runpod_statuses()}")
    return problems


def judge_huggingface(kind: str, body) -> list[str]:
    """`JobInfo(**body)` as `HfApi.inspect_job` builds it, with no field its constructor ignores;
    a list of them as `HfApi.list_jobs` reads each page (`JobInfo(**job_info)` for each item); the
    whoami answer `list_jobs` takes its namespace from (`whoami(token)["name"]`)."""
    from huggingface_hub import JobStage
    from huggingface_hub._jobs_api import JobInfo

    if kind == "job_list":
        if not isinstance(body, list):
            return ["not a list of Hugging Face jobs (list_jobs iterates the answer)"]
        return [f"$[{i}]: {p}" for i, job in enumerate(body) for p in judge_huggingface("job", job)]
    if kind == "whoami":
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return ["$.name: list_jobs reads whoami(token)[\"name\"] as the namespace, missing"]
        return []
    if kind != "job" or not isinstance(body, dict):
        return ["not a Hugging Face job object"]
    source = inspect.getsource(JobInfo.__init__)
    known = set(re.findall(r'kwargs(?:\.get\(|\[)"(\w+)"', source))
    problems = [f"$.{k}: a field JobInfo's constructor does not read" for k in body if k not in known]
    try:
        info = JobInfo(**body, endpoint="https://huggingface.co")
        JobStage(info.status.stage)
    except (KeyError, TypeError, ValueError) as e:
        problems.append(f"huggingface_hub cannot read this job: {e!r}")
    return problems


CURSOR_AGENT = {"id", "name", "status", "source", "target", "summary", "createdAt"}
CURSOR_REQUIRED = {"id", "name", "status", "source", "target", "createdAt"}
CURSOR_SOURCE = {"repository", "ref"}
CURSOR_TARGET = {"branchName", "url", "prUrl", "autoCreatePr"}


CURSOR_WEBHOOK = {"event", "timestamp", "id", "status", "source", "target", "summary"}
CURSOR_WEBHOOK_REQUIRED = {"event", "timestamp", "id", "status"}
# Its webhooks page: a statusChange to ERROR or FINISHED.
CURSOR_WEBHOOK_STATUSES = ["FINISHED", "ERROR"]


def judge_cursor(kind: str, body) -> list[str]:
    """An agent as Cursor's API reference gives it (GET /v0/agents/{id}), a page of the list
    (GET /v0/agents: `agents` and `nextCursor`), or its webhooks page's statusChange delivery:
    there is no SDK."""
    if kind == "agent_list" and isinstance(body, dict):
        problems = [f"$.{k}: not a field of the reference's agent list" for k in body if k not in {"agents", "nextCursor"}]
        for i, agent in enumerate(body.get("agents") or []):
            problems += [f"$.agents[{i}]: {p}" for p in judge_cursor("agent", agent)]
        return problems
    if kind == "webhook" and isinstance(body, dict):
        problems = [f"$.{k}: not a field of the webhooks page's payload" for k in body if k not in CURSOR_WEBHOOK]
        problems += [f"$.{k}: in every delivery, missing" for k in sorted(CURSOR_WEBHOOK_REQUIRED - set(body))]
        if body.get("event") != "statusChange":
            problems.append(f"$.event {body.get('event')!r}: the page's only event is statusChange")
        if body.get("status") not in CURSOR_WEBHOOK_STATUSES:
            problems.append(f"$.status {body.get('status')!r}: a webhook says {CURSOR_WEBHOOK_STATUSES}")
        problems += [f"$.source.{k}: not in the reference" for k in (body.get("source") or {}) if k not in CURSOR_SOURCE]
        problems += [f"$.target.{k}: not in the reference" for k in (body.get("target") or {}) if k not in CURSOR_TARGET]
        return problems
    if kind != "agent" or not isinstance(body, dict):
        return ["not a Cursor agent object"]
    problems = [f"$.{k}: not a field of the reference's agent" for k in body if k not in CURSOR_AGENT]
    problems += [f"$.{k}: required by the reference, missing" for k in sorted(CURSOR_REQUIRED - set(body))]
    problems += [f"$.source.{k}: not in the reference" for k in (body.get("source") or {}) if k not in CURSOR_SOURCE]
    problems += [f"$.target.{k}: not in the reference" for k in (body.get("target") or {}) if k not in CURSOR_TARGET]
    if body.get("status") not in CURSOR_STATUSES:
        problems.append(f"$.status {body.get('status')!r}: none of the reference's {CURSOR_STATUSES}")
    return problems


UNTYPED = {"genai:": judge_genai, "runpod:": judge_runpod, "huggingface:": judge_huggingface, "cursor:": judge_cursor}


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
    # Gemini (the shipped recipe): every event type of google-genai's webhook resource, about a job
    # of its kind (the SDK has no model of the body: the docs' thin {type, data: {id}}).
    for n, kind in enumerate(genai_webhook_events()):
        job = {"batch": f"batches/judge{n:02}", "video": f"models/veo-judge/operations/judge{n:02}"}.get(kind.split(".")[0], f"interactions/judge{n:02}")
        yield "gemini", kind, {"type": kind, "data": {"id": job}}


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
    for p in ("REPLICATE", "OPENAI", "ANTHROPIC", "GEMINI"):
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
# The SDKs installed without their dependencies (read, never imported).
REQUIREMENTS_NODEPS = ROOT / "tests" / "conformance" / "requirements-nodeps.txt"
# Packages whose newest typed release is a pre-release (replicate's 2.x line).
PRE_RELEASES = {"replicate"}


def cmd_upgrade() -> int:
    """Moves every pin of requirements.txt and requirements-nodeps.txt to the newest version on
    PyPI (`pip index versions`)."""
    changed = []
    for requirements in (REQUIREMENTS, REQUIREMENTS_NODEPS):
        changed += upgrade_file(requirements)
    print("conformance: pins: " + ("; ".join(changed) if changed else "every SDK is at its newest version"))
    return 0


def upgrade_file(requirements: Path) -> list[str]:
    lines, changed = [], []
    for line in requirements.read_text().splitlines():
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
    requirements.write_text("\n".join(lines) + "\n")
    return changed


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
