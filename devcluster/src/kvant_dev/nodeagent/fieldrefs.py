"""The downward API and env resolution, as the kubelet does them."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

from kvant_contracts.kube_object import Obj

Lookup = Callable[[str, str, str], Obj | None]  # (kind, namespace, name) -> object
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")
_LABEL_REF = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]")


class EnvError(ValueError):
    pass


def field_value(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
    }
    if path in simple:
        return str(simple[path])
    match = _LABEL_REF.fullmatch(path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    raise EnvError(f"fieldRef {path!r} is not supported by the local node agent")


def resource_value(container: Obj, resource: str) -> str:
    section, _, name = resource.partition(".")
    value = container.get("resources", {}).get(section, {}).get(name)
    return str(value) if value is not None else "0"


def object_data(obj: Obj) -> dict[str, str]:
    """ConfigMap data, or decoded Secret data, as strings."""
    data = dict(obj.get("data") or {})
    if "type" in obj:  # only Secrets carry a type
        return {k: base64.b64decode(v).decode() for k, v in data.items()} | dict(obj.get("stringData") or {})
    return data


def service_links(services: list[Obj]) -> dict[str, str]:
    """The kubelet's Service variables (`enableServiceLinks`): NAME_SERVICE_HOST, _SERVICE_PORT,
    _SERVICE_PORT_<PORT NAME>, and the Docker-link style NAME_PORT_<port>_<PROTO>_* ones."""
    env: dict[str, str] = {}
    for service in services:
        spec = service.get("spec") or {}
        ip, ports = spec.get("clusterIP"), spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue  # headless Services and ExternalName get no variables
        name = service["metadata"]["name"].upper().replace("-", "_")
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        for port in ports:
            number, proto = str(port["port"]), str(port.get("protocol", "TCP"))
            if port.get("name"):
                env[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = number
            prefix = f"{name}_PORT_{number}_{proto}"
            env[prefix] = f"{proto.lower()}://{ip}:{number}"
            env[f"{prefix}_PROTO"], env[f"{prefix}_PORT"], env[f"{prefix}_ADDR"] = proto.lower(), number, ip
        first = ports[0]
        env[f"{name}_PORT"] = f"{str(first.get('protocol', 'TCP')).lower()}://{ip}:{first['port']}"
    return env


def expand(text: str, env: dict[str, str]) -> str:
    """$(VAR) expansion for command, args and env values; unknown refs stay as written."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(repl, text)


def container_env(pod: Obj, container: Obj, lookup: Lookup, base: dict[str, str]) -> dict[str, str]:
    namespace = pod["metadata"]["namespace"]
    env = dict(base)
    for source in container.get("envFrom", []):
        for kind, ref_key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(ref_key)
            if ref:
                obj = _required(lookup, kind, namespace, ref["name"], ref.get("optional", False))
                prefix = source.get("prefix", "")
                env.update({prefix + k: v for k, v in object_data(obj).items()} if obj else {})
    for var in container.get("env", []):
        value = _env_value(pod, container, var, lookup, env)
        if value is not None:
            env[var["name"]] = value
    return env


def _env_value(pod: Obj, container: Obj, var: Obj, lookup: Lookup, env: dict[str, str]) -> str | None:
    if "valueFrom" not in var:
        return expand(var.get("value", ""), env)
    source = var["valueFrom"]
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        return resource_value(container, source["resourceFieldRef"]["resource"])
    for kind, ref_key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
        ref = source.get(ref_key)
        if ref:
            optional = ref.get("optional", False)
            obj = _required(lookup, kind, pod["metadata"]["namespace"], ref["name"], optional)
            data = object_data(obj) if obj else {}
            if ref["key"] not in data and not optional:
                raise EnvError(f"env {var['name']}: key {ref['key']!r} not found in {kind} {ref['name']}")
            return data.get(ref["key"])
    raise EnvError(f"env {var['name']}: unsupported valueFrom {sorted(source)}")


def _required(lookup: Lookup, kind: str, namespace: str, name: str, optional: bool) -> Obj | None:
    obj = lookup(kind, namespace, name)
    if obj is None and not optional:
        raise EnvError(f"{kind} {namespace}/{name} not found")
    return obj
