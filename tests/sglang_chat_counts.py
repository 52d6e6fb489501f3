"""Prompt token counts for chat completion requests, computed by SGLang's own code.

This is a test harness, not part of Kvant. It runs under SGLang's own Python
environment (the engine virtualenv that has ``sglang`` 0.5.23 and all its
dependencies), never under Kvant's, and only imports SGLang and its deps:

    <engine python> tests/sglang_chat_counts.py MODEL_DIR < requests.json

MODEL_DIR only needs tokenizer files (tokenizer.json, tokenizer_config.json
with a ``chat_template``, ...); weights and config.json are not read for the
count. stdin is a JSON list of chat completion request bodies, as a client
would POST them to ``/v1/chat/completions``. stdout is one JSON list with, for
each request, either ``{"count": N}`` (the number of prompt token ids SGLang
renders for it) or ``{"error": "message", "status": 400|500}`` where SGLang
would refuse it (400: a validation error or ValueError; 500: anything else the
handler would answer as an internal error).

How the count is made. ``POST /v1/tokenize`` with a ``messages`` body is
SGLang's own way of telling a client how many tokens a chat request's prompt
has: its handler parses the body as a ``TokenizeRequest`` and calls
``OpenAIServingTokenize._tokenize_chat_request``, which turns it into a
``ChatCompletionRequest``, runs ``OpenAIServingChat._validate_request`` and then
``OpenAIServingChat._process_messages`` -- the same rendering (HF chat template
with tools, reasoning_effort, chat_template_kwargs, continue_final_message) and
encoding that ``/v1/chat/completions`` feeds to the model. This script builds
the real objects that path uses and calls that method; nothing of the rendering
is re-implemented here:

* the process-wide config is a real ``ServerArgs`` published with
  ``runtime_context.publish(..., role="tokenizer")``, as the HTTP server does,
  so ``get_serving()`` / ``get_model()`` give SGLang's real defaults;
* the tokenizer comes from ``sglang.srt.utils.hf_transformers_utils.get_tokenizer``
  with the same arguments ``TokenizerManager.init_tokenizer_and_processor``
  passes (trust_remote_code False, the ServerArgs default, unless ``--trust-remote-code``);
* a real ``TemplateManager`` is initialised with ``initialize_templates``, as
  ``init_tokenizer_manager`` does, so the chat-template choice (built-in
  conversation template guessed from the model path, HF Jinja template, its
  content format, reasoning detection) is SGLang's;
* ``OpenAIServingTokenize`` (and the ``OpenAIServingChat`` it owns) run over a
  small stand-in for ``TokenizerManager`` (``_TokenizerManagerStandIn`` below),
  because the real one starts ZMQ sockets, schedulers and metrics. The
  stand-in has only the attributes this path reads.

``--via chat`` counts through the ``/v1/chat/completions`` path instead
(``ChatCompletionRequest`` -> ``_validate_request`` ->
``_convert_to_internal_request``, counting the ``input_ids`` it would hand to the
scheduler), to check that both paths agree. They differ on one key: a body
with ``add_generation_prompt`` is rendered "as given" by /v1/tokenize, while
/v1/chat/completions ignores that key.

No network: the Hugging Face hub is put in offline mode before anything is
imported, and every file read is local.
"""

from __future__ import annotations

import os

# Before transformers / huggingface_hub / sglang are imported: never reach the hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import sys
import tempfile
import types
import warnings

# SGLang's import-time UserWarnings ("only CUDA ... support AWQ/GGUF" on a
# host without an accelerator) are noise here; the filter must come first.
warnings.filterwarnings("ignore", category=UserWarning)

from pydantic import ValidationError  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import (  # noqa: E402
    ChatCompletionRequest,
    TokenizeRequest,
)
from sglang.srt.entrypoints.openai.serving_tokenize import OpenAIServingTokenize  # noqa: E402
from sglang.srt.parser.template_manager import TemplateManager  # noqa: E402
from sglang.srt.runtime_context import (  # noqa: E402
    get_context,
    get_model,
    get_serving,
    publish,
)
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.utils.hf_transformers_utils import get_tokenizer  # noqa: E402

# The model we pretend to serve: a plain text-only Llama-style decoder. Only
# these two fields of hf_config are read on the chat-rendering path
# (OpenAIServingChat.__init__ checks model_type for gpt_oss / gemma4 /
# minimax_m3_vl, chat_encoding.resolve_chat_encoding_spec and
# python_chat_template.resolve_python_chat_template look at architectures[0]).
_STAND_IN_HF_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}


def _publish_server_args(model_dir: str, scratch: str, trust_remote_code: bool):
    """Publish a real ServerArgs, as the HTTP server does before anything else.

    ServerArgs resolution loads the model's config.json with AutoConfig, and a
    tokenizer-only folder has none. So ``model_path`` points at a scratch
    folder that holds only the stand-in config.json, while ``tokenizer_path``
    is the real MODEL_DIR (that is what the tokenizer is loaded from).
    ``device="cpu"`` keeps resolution from looking for an accelerator; nothing
    on the rendering path depends on it.
    """
    with open(os.path.join(scratch, "config.json"), "w") as f:
        json.dump(_STAND_IN_HF_CONFIG, f)
    server_args = ServerArgs(
        model_path=scratch,
        tokenizer_path=model_dir,
        device="cpu",
        trust_remote_code=trust_remote_code,
    )
    publish(server_args, role="tokenizer")
    return server_args


class _TokenizerManagerStandIn:
    """The few TokenizerManager attributes the tokenize/chat rendering path reads.

    Read from sglang 0.5.23's serving_base.py, serving_chat.py,
    serving_tokenize.py and parser/template_manager.py.
    """

    def __init__(self, server_args, model_dir: str):
        # OpenAIServingBase.__init__: isinstance(server_args, ServerArgs) gates
        # reading get_observability() custom-label settings. The real object.
        self.server_args = server_args
        # TokenizerManager.model_path / served_model_name (the two "manager
        # owned" config fields). model_path is read by the chat-encoding adapter
        # factory (only for DeepSeek/Kimi-style encoders); served_model_name by
        # _parse_model_parameter (model names with ':') and a warning. In a
        # server both default to --model-path, i.e. the model folder.
        self.model_path = model_dir
        self.served_model_name = model_dir
        # Read by TemplateManager._resolve_hf_chat_template (a multimodal
        # processor's chat template wins over the tokenizer's). Text-only: None.
        self.processor = None
        # Exactly how TokenizerManager.init_tokenizer_and_processor loads the
        # tokenizer for a text-only model (trust_remote_code is the ServerArgs
        # default, False; tokenizer_mode "auto", backend "huggingface").
        self.tokenizer = get_tokenizer(
            get_serving().tokenizer_path,
            tokenizer_mode=get_serving().tokenizer_mode,
            trust_remote_code=get_model().trust_remote_code,
            revision=get_model().revision,
            tokenizer_backend=get_serving().tokenizer_backend,
        )
        # Stand-in for ModelConfig. Read on this path:
        #   is_multimodal  -- serving_tokenize / _validate_media_content /
        #                     _process_messages (text-only model: False);
        #   hf_config      -- model_type + architectures, see _STAND_IN_HF_CONFIG;
        #   get_default_sampling_params() -- OpenAIServingChat.__init__; only
        #                     feeds sampling params (generation_config.json),
        #                     never the prompt, so {} ("no defaults").
        self.model_config = types.SimpleNamespace(
            is_multimodal=False,
            hf_config=types.SimpleNamespace(**_STAND_IN_HF_CONFIG),
            get_default_sampling_params=lambda: {},
        )

    def config_value(self, name: str):
        """Same as TokenizerManager.config_value: the published config leaf.

        OpenAIServingChat.__init__ reads tool_call_parser and reasoning_parser
        here; with default ServerArgs both are None (checked in _build_serving()).
        """
        if name in ("model_path", "served_model_name"):
            return getattr(self, name)
        return get_context().config_leaf(name)


def _build_serving(model_dir: str, scratch: str, trust_remote_code: bool = False):
    server_args = _publish_server_args(model_dir, scratch, trust_remote_code)

    tokenizer_manager = _TokenizerManagerStandIn(server_args, model_dir)
    # As engine.init_tokenizer_manager / http_server do, with model_path the
    # real folder (the conversation-template guess matches on that path).
    template_manager = TemplateManager()
    template_manager.initialize_templates(
        tokenizer_manager=tokenizer_manager,
        model_path=model_dir,
        chat_template=get_serving().chat_template,
        completion_template=get_serving().completion_template,
    )
    serving = OpenAIServingTokenize(tokenizer_manager, template_manager)
    chat = serving.chat_serving
    if chat.tool_call_parser is not None or chat.reasoning_parser is not None:
        raise SystemExit(
            "expected no tool_call_parser / reasoning_parser, got "
            f"{chat.tool_call_parser!r} / {chat.reasoning_parser!r}"
        )
    return serving


def _count_via_tokenize(serving, body) -> dict:
    """What POST /v1/tokenize answers for this body (count, or the error)."""
    try:
        # FastAPI parses the body into TokenizeRequest; SGLang's
        # RequestValidationError handler answers a failure with 400.
        request = TokenizeRequest.model_validate(body)
    except ValidationError as e:
        return {"error": str(e), "status": 400}
    if request.messages is None:
        return {"error": "request has no messages", "status": 400}
    # The except clauses of OpenAIServingTokenize._handle_non_streaming_request.
    try:
        return {"count": len(serving._tokenize_chat_request(request))}
    except ValueError as e:  # includes pydantic.ValidationError
        return {"error": str(e), "status": 400}
    except Exception as e:
        return {"error": f"Internal server error during tokenization: {e}", "status": 500}


def _count_via_chat(serving, body) -> dict:
    """The input_ids /v1/chat/completions would send to the scheduler."""
    chat = serving.chat_serving
    try:
        request = ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        return {"error": str(e), "status": 400}
    # The steps and except clauses of OpenAIServingBase.handle_request.
    try:
        error = chat._validate_request(request)
        if error:
            return {"error": error, "status": 400}
        adapted, _ = chat._convert_to_internal_request(request, None)
    except ValueError as e:
        return {"error": str(e), "status": 400}
    except Exception as e:
        return {"error": f"Internal server error: {e}", "status": 500}
    if adapted.input_ids is None:
        return {"error": "chat path produced text, not input_ids", "status": 500}
    return {"count": len(adapted.input_ids)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", help="folder with the tokenizer files")
    parser.add_argument(
        "--via",
        choices=("tokenize", "chat"),
        default="tokenize",
        help="count through /v1/tokenize (default) or /v1/chat/completions code",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="load the folder's own tokenizer code, as the engine does under this flag",
    )
    args = parser.parse_args(argv)
    model_dir = os.path.abspath(args.model_dir)

    bodies = json.load(sys.stdin)
    if not isinstance(bodies, list):
        raise SystemExit("stdin must be a JSON list of request bodies")

    with tempfile.TemporaryDirectory(prefix="sglang-chat-counts-") as scratch:
        serving = _build_serving(model_dir, scratch, args.trust_remote_code)
        count = _count_via_chat if args.via == "chat" else _count_via_tokenize
        results = []
        for body in bodies:
            if not isinstance(body, dict):
                results.append({"error": "request body is not an object", "status": 400})
                continue
            results.append(count(serving, json.loads(json.dumps(body))))

    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
