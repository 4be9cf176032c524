"""A Kubernetes API emulator good enough for podmortem's tests: KMock's emulator with its gaps filled.

podmortem talks to Kubernetes in three ways — the official `kubernetes` client (aggregator), raw HTTP
(sidecar) and the real `kubectl` binary (the plugin) — and we test all three against one real HTTP
server rather than mocks. KMock's `KubernetesEmulator` (kmock 0.8) gives the server, discovery and an
object store; `PodmortemEmulator` serves every resource request itself on top of that store to fill
the gaps kmock 0.8 has (it ignores selectors, assigns no resourceVersion, replays every watch from the
start, answers PUT with 404, and its discovery and lists are not what kubectl accepts):

1. resourceVersion, uid, creationTimestamp, generation are assigned on every write (one global,
   increasing resourceVersion, as etcd's revision); lists carry `apiVersion`, `kind: <Kind>List` and a
   numeric `metadata.resourceVersion`.
2. Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and field selectors (any dotted
   path, `=`/`==`/`!=`; e.g. `metadata.name`, `status.phase`, `involvedObject.uid`) on LIST and WATCH.
3. WATCH honours `resourceVersion`: from a given version it replays only the later events from an
   event log; without one it starts with ADDED for the current objects. `compact()` drops the log so
   an older version gets the apiserver's answer: an `ERROR` event with a 410 Gone Status.
   `timeoutSeconds` ends the stream; `break_watches()` cuts every open stream mid-way.
4. PUT (replace) with the optimistic-concurrency check: a stale `metadata.resourceVersion` is a 409.
   PATCH honours a `metadata.resourceVersion` in the patch the same way, applies JSON patches with
   RFC 6902 semantics (a failed `test` op is a 422) and merge patches with RFC 7386 semantics
   (strategic merge is treated as a merge patch: lists are replaced).
5. The `status` subresource is kept apart, as the apiserver does for resources that declare it: writes
   to the main resource leave `.status` alone, writes to `/status` change only `.status`.
6. `pods/<name>/log` serves text set with `set_log()`, honouring `container`, `previous`, `tailLines`,
   `timestamps` (each line prefixed with the RFC 3339 time, nanoseconds, of the `set_log` that wrote it,
   as the kubelet prefixes the time its runtime recorded) and `limitBytes` (which, as in the apiserver,
   keeps the *first* bytes of the selected lines);
   `hold_logs()` keeps the answers back, so that a test can count the reads in flight.
7. Bearer-token authentication when a token is configured (401 otherwise).
8. Fault injection: `fail(status, times, ...)` answers the next matching requests with that status
   (429 with a `Retry-After` header, `retry_after` seconds, 0 unless asked).
9. Admission on create (`support.kube_admission`): a batch Job is defaulted as the API server decodes
   it, then every registered mutating webhook (`register_webhook`: a real HTTPS endpoint, called with an
   `admission.k8s.io/v1` AdmissionReview in configuration-name order, its JSONPatch applied) sees the
   defaulted object, then the Job is validated (a 422 Invalid names the field) and only then stored.
   Another project's webhook (JobSet's defaulting) can be registered as an in-process model of its source.
   Objects seeded with `put` skip admission, as a controller's writes to status would not need it.
10. What the real `kubectl` needs: core discovery says `groupVersion: "v1"` (KMock says `"/v1"`),
   lists have `kind`/`apiVersion`, watch streams are `application/json`, Status bodies for errors.

tests/integration/test_kube_emulator.py holds these behaviours against the API's documentation.

What of kmock this leans on beyond its public names (`kmock.KubernetesEmulator`, `Server`, `Request`,
`Payload`, `ResourceInfo`, `resource`): it overrides the emulator's request hook `_handle` and the
discovery hook `_serve_version`, reads its store (`_objects`, `_resources`, `_get_resources()`), and
takes the aiohttp request from `Request._raw_request` to stream watch responses and cut them mid-way.
kmock has no public extension point for serving resource requests itself; a kmock upgrade that
renames these fails this module's tests first.

It is one module of ~900 lines because it is one request path over one store: every numbered item
above reads and writes the same object store and event log.

`running_emulator()` runs it in its own thread with its own event loop, so that the test's loop, the
sync `kubernetes` client (in threads), the sidecar's asyncio HTTP client and `kubectl` subprocesses can
all talk to it at once; `EmulatorHandle` offers thread-safe helpers to seed and change objects. The
objects the tests seed (PyTorchJobs, pods, Jobs, JobSets, TrainJobs, Decisions) are built in
`support.kube_objects`.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import copy
import dataclasses
import datetime
import json
import random
import re
import ssl as ssl_module
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web
import attrs
import jsonpatch
import kmock
from kmock import Payload, Request
from kmock import resource as Resource

from support import kube_admission

JSON = dict[str, Any]
Key = tuple[Resource, str | None, str]


# -- pure helpers ------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any, strategic: bool = False) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, null deletes, everything else replaces. With
    `strategic`, a `conditions` list merges by `type` (patchMergeKey) as the API server's strategic merge does."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif strategic and key == "conditions" and isinstance(value, list) and isinstance(result.get(key), list):
            merged = {c.get("type"): c for c in result[key] if isinstance(c, dict)}
            for c in value:
                if isinstance(c, dict):
                    merged[c.get("type")] = merge_patch(merged.get(c.get("type")), c, strategic)
            result[key] = list(merged.values())
        else:
            result[key] = merge_patch(result.get(key), value, strategic)
    return result


_REQ = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_./-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def match_labels(selector: str, labels: dict[str, str]) -> bool:
    for term in _split_selector(selector or ""):
        if m := _REQ.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if (op == "in") != (labels.get(key) in values) or (op == "in" and key not in labels):
                return False
        elif m := _EQ.match(term):
            key, op, value = m.groups()
            if (labels.get(key) == value) != (op in ("=", "==")):
                return False
        elif m := _EXISTS.match(term):
            if (m.group(2) in labels) == bool(m.group(1)):
                return False
        else:
            raise ValueError(f"bad label selector term {term!r}")
    return True


def _lookup(obj: Any, dotted: str) -> str:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return "" if obj is None else str(obj)


def match_fields(selector: str, obj: JSON) -> bool:
    for term in _split_selector(selector or ""):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise ValueError(f"bad field selector term {term!r}")
        path, op, value = m.groups()
        if (_lookup(obj, path) == value) != (op in ("=", "==")):
            return False
    return True


def now_rfc3339() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the emulator ------------------------------------------------------------------------------


@dataclasses.dataclass
class Fault:
    status: int
    times: int
    methods: frozenset[str] = frozenset({"POST", "PUT", "PATCH", "DELETE"})
    plural: str | None = None
    subresource: str | None = "*"  # "*": any; None: the main resource only
    served: int = 0
    probability: float = 1.0  # < 1: each matching request fails with this chance (seeded: the emulator's `rng`)
    retry_after: int = 0  # a 429's Retry-After header, in seconds


@dataclasses.dataclass(frozen=True)
class Webhook:
    """A mutating admission webhook as a MutatingWebhookConfiguration states it, for the emulator to call."""

    name: str  # the configuration's name: the API server calls webhooks in the order of these names
    url: str
    resources: frozenset[str]  # "group/plural" ("batch/jobs", "jobset.x-k8s.io/jobsets"; "/pods" for core)
    ssl: ssl_module.SSLContext | None = None  # trusts the webhook's serving CA (the caBundle)
    failure_policy: str = "Fail"  # "Ignore": an unreachable webhook lets the object through unchanged
    timeout: float = 10.0
    # Another project's webhook, modelled in-process from its source (`url` unused): object -> mutated object.
    model: Callable[[JSON], JSON] | None = None


class _Problem(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


@attrs.define(kw_only=True)
class PodmortemEmulator(kmock.KubernetesEmulator):
    token: str | None = None
    logs: dict[tuple[str, str, str], str] = attrs.field(factory=dict)
    previous_logs: dict[tuple[str, str, str], str] = attrs.field(factory=dict)
    log_times: dict[tuple[str, str, str], float] = attrs.field(factory=dict)  # when each log was last written
    logs_held: bool = False  # while True, log reads wait (`hold_logs`): readers in flight can be counted
    log_readers: int = 0  # log reads being answered now
    rng: random.Random = attrs.field(factory=lambda: random.Random(1))
    faults: list[Fault] = attrs.field(factory=list)
    history: list[tuple[int, Resource, str, JSON]] = attrs.field(factory=list)  # (rv, res, type, obj)
    revision: int = 1000
    compacted: int = 0  # events up to this revision are gone from `history`
    watch_epoch: int = 0  # bumped by break_watches()
    open_watches: int = 0
    seen: list[tuple[str, str]] = attrs.field(factory=list)  # (method, path_qs) of every request
    # TokenReview: kmock echoes the request with no status. Here a review answers from this map of
    # bound service-account tokens -> the TokenReview status the API server would give (gap filled here).
    service_account_tokens: dict[str, JSON] = attrs.field(factory=dict)
    webhooks: list[Webhook] = attrs.field(factory=list)  # mutating admission, in calling order
    reviews: list[JSON] = attrs.field(factory=list)  # every AdmissionReview request sent to a webhook
    _changed: asyncio.Condition | None = attrs.field(default=None)

    # -- discovery fixes for kubectl --

    async def _serve_version(self, request: Request) -> Payload:
        payload = await super()._serve_version(request)
        if isinstance(payload, dict):
            payload["groupVersion"] = str(payload.get("groupVersion", "")).lstrip("/")
        return payload

    # -- the request path --

    @property
    def changed(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _handle(self, request: Request) -> aiohttp.web.StreamResponse:
        raw = request._raw_request
        self.seen.append((str(request.method.value), str(raw.path_qs) if raw is not None else ""))
        res = request.resource
        if res is None or res.plural is None:
            return await super()._handle(request)  # discovery, /version, ...
        try:
            if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
                raise _Problem(401, "Unauthorized", "Unauthorized")
            fault = self._fault(request)
            if fault is not None:
                headers = {"Retry-After": str(fault.retry_after)} if fault.status == 429 else None
                return self._status(fault.status, "Injected", f"injected fault {fault.status}", headers)
            if not any(r == res for r in self._get_resources()):
                raise _Problem(404, "NotFound", f"the server could not find the requested resource {res}")
            return await self._dispatch(request, res)
        except _Problem as p:
            return self._status(p.status, p.reason, p.message)

    def _fault(self, request: Request) -> Fault | None:
        for fault in self.faults:
            if fault.served >= fault.times or request.method.value not in fault.methods:
                continue
            if fault.plural is not None and request.resource is not None and fault.plural != request.resource.plural:
                continue
            if fault.subresource != "*" and fault.subresource != request.subresource:
                continue
            if fault.probability < 1.0 and self.rng.random() >= fault.probability:
                continue
            fault.served += 1
            return fault
        return None

    @staticmethod
    def _status(
        code: int, reason: str, message: str, headers: dict[str, str] | None = None
    ) -> aiohttp.web.StreamResponse:
        body = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message,
        }
        return aiohttp.web.json_response(body, status=code, headers=headers)

    async def _dispatch(self, request: Request, res: Resource) -> aiohttp.web.StreamResponse:
        method, name, sub = request.method.value, request.name, request.subresource
        params = request.params
        if method == "GET" and params.get("watch") in ("true", "1"):
            return await self._watch(request, res)
        if method == "GET" and name is None:
            return aiohttp.web.json_response(self._list(request, res))
        if method == "GET" and sub == "log":
            return await self._log(request)
        if method == "GET" and sub in (None, "status") and name is not None:
            return aiohttp.web.json_response(self._get(res, request.namespace, name))
        if method == "POST" and name is None and res.plural == "tokenreviews":
            return aiohttp.web.json_response(self._review(request), status=201)
        if method == "POST" and name is None:
            return aiohttp.web.json_response(await self._create(request, res), status=201)
        if method == "PUT" and name is not None and sub in (None, "status"):
            return aiohttp.web.json_response(await self._replace(request, res, name))
        if method == "PATCH" and name is not None and sub in (None, "status"):
            return aiohttp.web.json_response(await self._patch(request, res, name))
        if method == "DELETE" and name is not None and sub is None:
            return aiohttp.web.json_response(await self.remove(res, request.namespace, name))
        raise _Problem(405, "MethodNotAllowed", f"{method} is not supported on this path")

    # -- state --

    def _kind(self, res: Resource) -> str:
        for r in self._resources:
            if r == res:
                info = self._resources[r]
                if info.kind:
                    return str(info.kind)
        return str(res.plural).rstrip("s").capitalize()

    def _api_version(self, res: Resource) -> str:
        return f"{res.group}/{res.version}" if res.group else str(res.version)

    def _has_status(self, res: Resource) -> bool:
        for r in self._resources:
            if r == res:
                return "status" in set(self._resources[r].subresources)
        return False

    def _current(self, res: Resource, namespace: str | None, name: str) -> JSON | None:
        key = (res, namespace, name)
        if key not in self._objects:
            return None
        obj = self._objects[key]
        if obj.deleted:
            return None
        stored = obj.raw
        meta = stored.setdefault("metadata", {})
        if "resourceVersion" not in meta:  # seeded directly into `objects`: stamp it now
            self._stamp(res, stored, namespace, name)
            obj.history[-1] = stored
        return copy.deepcopy(stored)

    def _stamp(self, res: Resource, obj: JSON, namespace: str | None, name: str) -> None:
        meta = obj.setdefault("metadata", {})
        meta["name"] = name
        if namespace is not None:
            meta["namespace"] = namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        meta.setdefault("generation", 1)
        self.revision += 1
        meta["resourceVersion"] = str(self.revision)
        obj.setdefault("apiVersion", self._api_version(res))
        obj.setdefault("kind", self._kind(res))

    async def _store(self, res: Resource, obj: JSON, event: str) -> JSON:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace"), meta["name"]
        self.revision += 1
        meta["resourceVersion"] = str(self.revision)
        key = (res, namespace, name)
        if key in self._objects and event != "DELETED":
            if self._objects[key].deleted:
                self._objects[key].create(copy.deepcopy(obj))
            else:
                self._objects[key].history.append(copy.deepcopy(obj))
        elif key not in self._objects:
            self._objects[key] = copy.deepcopy(obj)
        if event == "DELETED":
            self._objects[key].delete()
        self.history.append((self.revision, res, event, copy.deepcopy(obj)))
        async with self.changed:
            self.changed.notify_all()
        return obj

    def _get(self, res: Resource, namespace: str | None, name: str) -> JSON:
        obj = self._current(res, namespace, name)
        if obj is None:
            raise _Problem(404, "NotFound", f'{res.plural} "{name}" not found')
        return obj

    def _matching(self, request: Request, res: Resource) -> list[JSON]:
        out = []
        for r, namespace, name in list(self._objects):
            if r != res or (request.namespace is not None and namespace != request.namespace):
                continue
            obj = self._current(r, namespace, name)
            if obj is not None and self._selected(request, obj):
                out.append(obj)
        return out

    @staticmethod
    def _selected(request: Request, obj: JSON) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return match_labels(request.params.get("labelSelector", ""), labels) and match_fields(
            request.params.get("fieldSelector", ""), obj
        )

    def _list(self, request: Request, res: Resource) -> JSON:
        return {
            "apiVersion": self._api_version(res),
            "kind": f"{self._kind(res)}List",
            "metadata": {"resourceVersion": str(self.revision)},
            "items": self._matching(request, res),
        }

    def _review(self, request: Request) -> JSON:
        review = copy.deepcopy(request.data) if isinstance(request.data, dict) else {}
        spec = review.get("spec") or {}
        known = self.service_account_tokens.get(str(spec.get("token") or ""))
        wanted = set(spec.get("audiences") or [])
        if known is None or (wanted and not wanted & set(known.get("audiences") or [])):
            review["status"] = {"authenticated": False, "error": "token not valid for these audiences"}
        else:
            review["status"] = {"authenticated": True, **copy.deepcopy(known)}
        return review

    async def _create(self, request: Request, res: Resource) -> JSON:
        obj = copy.deepcopy(request.data)
        if not isinstance(obj, dict):
            raise _Problem(400, "BadRequest", "body is not an object")
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        namespace = request.namespace or meta.get("namespace")
        if self._current(res, namespace, meta.get("name", "")) is not None:
            raise _Problem(409, "AlreadyExists", f'{res.plural} "{meta.get("name")}" already exists')
        meta.pop("resourceVersion", None)
        obj = await self._admit(res, namespace, obj)
        self._stamp(res, obj, namespace, obj["metadata"]["name"])
        return await self._store(res, obj, "ADDED")

    async def _admit(self, res: Resource, namespace: str | None, obj: JSON) -> JSON:
        """Defaulting, mutating webhooks, validation: the API server's order for a create (module doc, 9)."""
        is_job = (res.group, res.plural) == ("batch", "jobs")
        if is_job:
            obj = kube_admission.default_job(obj)
        for hook in self.webhooks:
            if f"{res.group or ''}/{res.plural}" in hook.resources:
                obj = await self._call_webhook(hook, res, namespace, obj)
        if is_job and (errors := kube_admission.validate_job(obj)):
            name = (obj.get("metadata") or {}).get("name")
            detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            raise _Problem(422, "Invalid", f'Job.batch "{name}" is invalid: {detail}')
        return obj

    async def _call_webhook(self, hook: Webhook, res: Resource, namespace: str | None, obj: JSON) -> JSON:
        if hook.model is not None:
            return hook.model(copy.deepcopy(obj))
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": res.group or "", "version": res.version, "kind": self._kind(res)},
                "resource": {"group": res.group or "", "version": res.version, "resource": res.plural},
                "namespace": namespace,
                "name": (obj.get("metadata") or {}).get("name", ""),
                "operation": "CREATE",
                "object": copy.deepcopy(obj),
            },
        }
        self.reviews.append(copy.deepcopy(review))
        try:
            timeout = aiohttp.ClientTimeout(total=hook.timeout)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.post(hook.url, json=review, ssl=hook.ssl if hook.ssl else False) as resp:
                    resp.raise_for_status()
                    answer = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            if hook.failure_policy == "Ignore":
                return obj
            raise _Problem(500, "InternalError", f'failed calling webhook "{hook.name}": {exc}') from exc
        response = answer.get("response") or {}
        if not response.get("allowed"):
            message = (response.get("status") or {}).get("message", "")
            raise _Problem(400, "BadRequest", f'admission webhook "{hook.name}" denied the request: {message}')
        if not response.get("patch"):
            return obj
        patch = json.loads(base64.b64decode(response["patch"]))
        try:
            return dict(jsonpatch.apply_patch(obj, patch))
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise _Problem(
                500, "InternalError", f'webhook "{hook.name}" sent a patch that does not apply: {exc}'
            ) from exc

    def _check_version(self, given: Any, current: JSON, name: str) -> None:
        if given and str(given) != current["metadata"]["resourceVersion"]:
            raise _Problem(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )

    def _finish_write(self, res: Resource, sub: str | None, old: JSON, new: JSON) -> JSON:
        if self._has_status(res):
            if sub == "status":
                new = dict(old, status=new.get("status"))
            elif "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        for field in ("name", "namespace", "uid", "creationTimestamp"):
            if field in old["metadata"]:
                meta[field] = old["metadata"][field]
        if sub is None and new.get("spec") != old.get("spec"):
            meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return new

    async def _replace(self, request: Request, res: Resource, name: str) -> JSON:
        old = self._get(res, request.namespace, name)
        body = copy.deepcopy(request.data)
        if not isinstance(body, dict):
            raise _Problem(400, "BadRequest", "body is not an object")
        self._check_version((body.get("metadata") or {}).get("resourceVersion"), old, name)
        new = self._finish_write(res, request.subresource, old, body)
        return await self._store(res, new, "MODIFIED")

    async def _patch(self, request: Request, res: Resource, name: str) -> JSON:
        old = self._get(res, request.namespace, name)
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        body = request.data
        if ctype == "application/json-patch+json":
            if not isinstance(body, list):
                raise _Problem(400, "BadRequest", "a JSON patch is a list of operations")
            try:
                new = jsonpatch.apply_patch(copy.deepcopy(old), body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise _Problem(422, "Invalid", f"the JSON patch cannot be applied: {exc}") from exc
        elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(body, dict):
                raise _Problem(400, "BadRequest", "a merge patch is an object")
            self._check_version((body.get("metadata") or {}).get("resourceVersion"), old, name)
            new = merge_patch(old, body, strategic=ctype == "application/strategic-merge-patch+json")
        else:
            raise _Problem(415, "UnsupportedMediaType", f"the patch content type {ctype!r} is not supported")
        new = self._finish_write(res, request.subresource, old, new)
        return await self._store(res, new, "MODIFIED")

    async def _log(self, request: Request) -> aiohttp.web.StreamResponse:
        assert request.name is not None
        self._get(Resource("", "v1", "pods"), request.namespace, request.name)
        container = request.params.get("container", "")
        previous = request.params.get("previous") == "true"  # the run before the container's restart
        text = (self.previous_logs if previous else self.logs).get((request.namespace or "", request.name, container))
        if text is None:
            which = "a previous terminated" if previous else "a"
            raise _Problem(400, "BadRequest", f"container {container!r} has no log of {which} run")
        if "tailLines" in request.params:
            n = int(request.params["tailLines"])
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-n:] if n else [])
        if request.params.get("timestamps") == "true":
            key = (request.namespace or "", request.name, container)
            written = self.log_times.get(key, 0.0)
            whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(written))
            stamp = f"{whole}.{round((written % 1) * 1e9):09d}Z "
            text = "".join(stamp + line for line in text.splitlines(keepends=True))
        data = text.encode()
        if "limitBytes" in request.params:
            data = data[: int(request.params["limitBytes"])]
        self.log_readers += 1
        try:
            async with self.changed:
                await self.changed.wait_for(lambda: not self.logs_held)
        finally:
            self.log_readers -= 1
        return aiohttp.web.Response(body=data, content_type="text/plain")

    async def _watch(self, request: Request, res: Resource) -> aiohttp.web.StreamResponse:
        raw = request._raw_request
        assert raw is not None
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        since = request.params.get("resourceVersion", "")
        timeout = float(request.params.get("timeoutSeconds", "0") or 0)
        epoch = self.watch_epoch
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout > 0 else None

        async def send(kind: str, obj: JSON) -> None:
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        self.open_watches += 1
        try:
            if since in ("", "0"):
                for obj in self._matching(request, res):
                    await send("ADDED", obj)
                position = self.revision
            elif int(since) < self.compacted:
                gone = {
                    "apiVersion": "v1",
                    "kind": "Status",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {since} ({self.compacted})",
                    "reason": "Expired",
                    "code": 410,
                }
                await send("ERROR", gone)
                return response
            else:
                position = int(since)
            while self.watch_epoch == epoch:
                for rv, r, kind, obj in list(self.history):
                    if rv <= position:
                        continue
                    position = rv  # past other resources' changes too, or the wait below never happens
                    if r != res:
                        continue
                    ns = (obj.get("metadata") or {}).get("namespace")
                    if request.namespace is not None and ns != request.namespace:
                        continue
                    if self._selected(request, obj):
                        await send(kind, obj)
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                async with self.changed:
                    if self.watch_epoch == epoch and (not self.history or self.history[-1][0] <= position):
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self.changed.wait(), timeout=min(remaining or 0.5, 0.5))
            if self.watch_epoch != epoch:
                # Cut mid-stream: drop the connection without finishing the chunked body.
                if raw.transport is not None:
                    raw.transport.close()
                return response
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        finally:
            self.open_watches -= 1
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    # -- helpers called on the emulator's loop (via EmulatorHandle) --

    # Shadows kmock's handler-DSL `put` (a route builder we never use on this class): the test-side name
    # for "store this object" reads best as put, so the override is deliberate.
    async def put(self, res: Resource, obj: JSON) -> JSON:  # type: ignore[override]
        """Create or overwrite (status included) an object, as its controller or the kubelet would."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        namespace, name = meta.get("namespace"), meta["name"]
        old = self._current(res, namespace, name)
        if old is None:
            meta.pop("resourceVersion", None)
            self._stamp(res, obj, namespace, name)
            return await self._store(res, obj, "ADDED")
        for field in ("uid", "creationTimestamp", "generation"):
            meta.setdefault(field, old["metadata"].get(field))
        obj.setdefault("apiVersion", self._api_version(res))
        obj.setdefault("kind", self._kind(res))
        return await self._store(res, obj, "MODIFIED")

    async def change(self, res: Resource, namespace: str | None, name: str, patch: JSON) -> JSON:
        old = self._get(res, namespace, name)
        return await self._store(res, merge_patch(old, patch), "MODIFIED")

    async def remove(self, res: Resource, namespace: str | None, name: str) -> JSON:
        obj = self._get(res, namespace, name)
        return await self._store(res, obj, "DELETED")

    async def compact(self) -> None:
        self.compacted = self.revision
        self.history.clear()
        self.watch_epoch += 1  # the apiserver's watch cache expiring also ends the streams
        async with self.changed:
            self.changed.notify_all()

    async def break_watches(self) -> None:
        self.watch_epoch += 1
        async with self.changed:
            self.changed.notify_all()


# -- running it in a thread --------------------------------------------------------------------

PYTORCHJOBS = "kubeflow.org/v1/pytorchjobs"
JOBSETS = "jobset.x-k8s.io/v1alpha2/jobsets"
TRAINJOBS = "trainer.kubeflow.org/v1alpha1/trainjobs"
PODS = "v1/pods"
JOBS = "batch/v1/jobs"
EVENTS = "v1/events"


@dataclasses.dataclass
class EmulatorHandle:
    """The emulator running in its own thread; every method is safe to call from any thread."""

    emulator: PodmortemEmulator
    loop: asyncio.AbstractEventLoop
    url: str

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop).result(timeout=10)

    def put(self, resource: str, obj: JSON) -> JSON:
        result: JSON = self.call(self.emulator.put, Resource(resource), obj)
        return result

    def change(self, resource: str, namespace: str | None, name: str, patch: JSON) -> JSON:
        result: JSON = self.call(self.emulator.change, Resource(resource), namespace, name, patch)
        return result

    def remove(self, resource: str, namespace: str | None, name: str) -> JSON:
        result: JSON = self.call(self.emulator.remove, Resource(resource), namespace, name)
        return result

    def get(self, resource: str, namespace: str | None, name: str) -> JSON | None:
        async def read() -> JSON | None:
            return self.emulator._current(Resource(resource), namespace, name)

        result: JSON | None = self.call(read)
        return result

    def list(self, resource: str, namespace: str | None = None) -> list[JSON]:
        async def read() -> list[JSON]:
            out = []
            for r, ns, name in list(self.emulator.objects):
                if r == Resource(resource) and (namespace is None or ns == namespace):
                    obj = self.emulator._current(r, ns, name)
                    if obj is not None:
                        out.append(obj)
            return out

        result: list[JSON] = self.call(read)
        return result

    def compact(self) -> None:
        self.call(self.emulator.compact)

    def break_watches(self) -> None:
        self.call(self.emulator.break_watches)

    def fail(
        self,
        status: int,
        times: int,
        *,
        methods: tuple[str, ...] = ("POST", "PUT", "PATCH", "DELETE"),
        plural: str | None = None,
        subresource: str | None = "*",
        probability: float = 1.0,
        retry_after: int = 0,
    ) -> Fault:
        fault = Fault(
            status, times, frozenset(methods), plural, subresource, probability=probability, retry_after=retry_after
        )

        async def add() -> None:
            self.emulator.faults.append(fault)

        self.call(add)
        return fault

    def bind_token(self, token: str, namespace: str, pod: str, uid: str = "", audience: str = "podmortem") -> None:
        """A projected service-account token bound to `pod` (what the kubelet mounts in the sidecar)."""
        self.emulator.service_account_tokens[token] = {
            "user": {
                "username": f"system:serviceaccount:{namespace}:default",
                "extra": {
                    "authentication.kubernetes.io/pod-name": [pod],
                    "authentication.kubernetes.io/pod-uid": [uid or f"uid-{pod}"],
                },
            },
            "audiences": [audience],
        }

    def register_webhook(self, hook: Webhook) -> None:
        """Call `hook` on every create of its resources from now on (in configuration-name order)."""

        async def add() -> None:
            self.emulator.webhooks = sorted([*self.emulator.webhooks, hook], key=lambda h: h.name)

        self.call(add)

    def hold_logs(self, held: bool = True) -> None:
        """While held, log reads wait unanswered (`emulator.log_readers` counts them); False lets them go."""

        async def switch() -> None:
            self.emulator.logs_held = held
            async with self.emulator.changed:
                self.emulator.changed.notify_all()

        self.call(switch)

    def set_log(
        self, namespace: str, pod: str, container: str, text: str, previous: bool = False, at: float | None = None
    ) -> None:
        """The container's log (`previous`: its run before the last restart, read with previous=true), last
        written `at` (seconds since the epoch; now by default: what `timestamps=true` shows)."""
        logs = self.emulator.previous_logs if previous else self.emulator.logs
        logs[(namespace, pod, container)] = text
        if not previous:
            self.emulator.log_times[(namespace, pod, container)] = time.time() if at is None else at

    def requests(self) -> builtins.list[tuple[str, str]]:
        return list(self.emulator.seen)

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        token = self.emulator.token or "test-token"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "emu", "cluster": {"server": self.url}}],
                    "users": [{"name": "emu", "user": {"token": token}}],
                    "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu", "namespace": namespace}}],
                    "current-context": "emu",
                }
            )
        )
        return path


def declare_resources(emu: PodmortemEmulator) -> None:
    emu.resources.load_bundled()
    emu.resources[PYTORCHJOBS] = kmock.ResourceInfo(
        kind="PyTorchJob", singular="pytorchjob", namespaced=True, subresources={"status"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    )  # fmt: skip
    emu.resources[JOBSETS] = kmock.ResourceInfo(
        kind="JobSet", singular="jobset", namespaced=True, subresources={"status"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    )  # fmt: skip
    emu.resources[TRAINJOBS] = kmock.ResourceInfo(
        kind="TrainJob", singular="trainjob", namespaced=True, subresources={"status"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    )  # fmt: skip


@contextlib.contextmanager
def running_emulator(token: str | None = "test-token") -> Iterator[EmulatorHandle]:
    """Start the emulator on 127.0.0.1 (a free port) in a daemon thread; stop it on exit."""
    ready: dict[str, Any] = {}
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        emu = PodmortemEmulator(token=token)
        declare_resources(emu)
        async with emu, kmock.Server(emu, host="127.0.0.1", port=0) as srv:
            ready["handle"] = EmulatorHandle(emu, asyncio.get_running_loop(), str(srv.url).rstrip("/"))
            started.set()
            await stop.wait()
            await emu.break_watches()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # pragma: no cover - surfaced to the test below
            ready["error"] = exc
            started.set()

    thread = threading.Thread(target=run, name="kube-emulator", daemon=True)
    thread.start()
    started.wait(timeout=30)
    if "error" in ready:
        raise RuntimeError("the emulator did not start") from ready["error"]
    handle: EmulatorHandle = ready["handle"]
    try:
        yield handle
    finally:
        assert stop is not None
        handle.loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)


def __getattr__(name: str) -> Any:
    """The object factories lived in this module before they moved to `support.kube_objects`: tests
    written against the old place (other branches) still import them from here."""
    from support import kube_objects

    try:
        return getattr(kube_objects, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
