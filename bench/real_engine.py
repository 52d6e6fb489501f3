"""The real SGLang engine on loopback, launched as a serving pod launches it, for the benches (bench/, not
kvant_dev: it needs the runtime's launcher, and kvant_dev does not depend on the runtime).

The engine image (hack/engine-image.sh) runs Kvant's launcher zipapp with its own Python, from a
launch spec with `device: cpu`, exactly as the engine container does in the local cluster: the
launcher validates the command line with SGLang's parser and execs `sglang.launch_server`. The engine
binds 127.0.0.1 only. The process group is stopped at the end (SGLang starts a scheduler and a
detokenizer beside its HTTP server), killed if it has not stopped 20 s after SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from kvant_contracts.launch_spec import LaunchSpec
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.toolchain import ENGINE_ENVIRONMENT, built_environment
from kvant_runtime.launch.zipapp import build_launcher

START_SECONDS = 600  # a cold start on a loaded 2-core machine took up to 145 s


class EngineImageMissing(RuntimeError):
    pass


class EngineExited(RuntimeError):
    pass


def engine_python() -> Path:
    found = built_environment(ENGINE_ENVIRONMENT)
    if found is None:
        raise EngineImageMissing("the real engine's environment is not built: run `make tools`")
    return found / "bin" / "python"


@contextlib.contextmanager
def real_engine(
    model: Path,
    kv_tokens: int,
    workdir: Path,
    max_running_requests: int = 64,
    cpus: set[int] | None = None,
    *,
    scheduler: dict[str, float] | None = None,
    engine_args: tuple[str, ...] = (),
) -> Iterator[str]:
    """Serves `model` (a BF16 checkpoint folder) with `--max-total-tokens kv_tokens`; yields its URL.
    `cpus`: the only CPUs the engine may run on (None: any); `scheduler`: SGLang's admission knobs
    (kvant_contracts.engine_scheduler), which the launcher applies as a serving pod's would;
    `engine_args`: further SGLang flags, as `spec.serving.engineArgs` passes them."""
    port = free_port()
    spec = LaunchSpec(
        modelPath=str(model),
        servedModelName="bench",
        weightsFormat="bf16",
        kvCacheDtype="bf16",
        maxTotalTokens=kv_tokens,
        maxRunningRequests=max_running_requests,
        device="cpu",
        host="127.0.0.1",
        port=port,
        scheduler=scheduler or {},
        engineArgs=engine_args,
    )
    launcher = build_launcher(workdir / "kvant-launch.pyz")
    log = (workdir / f"engine-{port}.log").open("wb")
    command = [str(engine_python()), str(launcher), "launch", "--spec-json", spec.to_json()]
    # SGLang's caches (torch inductor, JIT kernels) default to ~/.cache/sglang: the bench's folder instead.
    env = {**os.environ, "SGLANG_CACHE_DIR": str(workdir / "sglang-cache")}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    if cpus:  # before SGLang starts its scheduler and detokenizer (seconds later), which inherit it
        os.sched_setaffinity(process.pid, cpus)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:  # it will never answer: say so now, not after START_SECONDS
            raise EngineExited(f"the real SGLang engine exited ({process.returncode}):\n{_tail(log)}")
        return http_ok(f"{url}/health")

    try:
        wait_until(up, START_SECONDS, "the real SGLang engine", lambda: _tail(log))
        yield url
    finally:
        _stop_group(process)
        log.close()


def _tail(log: object) -> str:
    path = Path(getattr(log, "name", ""))
    return path.read_text(errors="replace")[-3000:] if path.is_file() else ""


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
