"""The published config.json of each checkpoint family the engine loads, and the facts about
its tokenizer and chat template the fixtures of `tests/fakes/real_ckpts.py` copy.

Sources (read with the project's search tools; the Hugging Face repos themselves are not
reachable from here, so each config is the copy a public GitHub repository carries):
- LLaDA2.0-mini / LLaDA2.1-mini (inclusionAI, model_type llada2_moe): the config xLLM's loader
  test parses (`HFModelLoaderTest.LLaDAModelArgsLoader`, every key of both of its copies), with
  `architectures` from the published modeling code. LLaDA2.1-mini has the same shape.
  Tokenizer: 157,153 tokens (ids 0..157152, `</role>` last) for 157,184 embedding rows;
  `<|endoftext|>` 156892 (= pad), `<|mask|>` 156895 (SGLang's dllm config), `<role>` 157151,
  `</role>` 157152 (the Ling tokenizer). `<|role_end|>`'s id was not found in a public copy:
  the fixture puts it at 156900 (flagged in SOURCES).
- LLaDA-8B-Instruct (GSAI-ML): config.json and tokenizer_config.json verbatim in
  yinj66/support_basis `LLaDA-8B-Instruct-B&S-light/` (the chat template below is its
  `chat_template`). 126,349 tokens (ids 0..126348, `<|eot_id|>` last) for 126,464 rows.
  LLaDA-8B-Base: the same config (same architecture file); its tokenizer has no chat template.
- Dream-v0-Instruct-7B / Dream-v0-Base-7B (Dream-org): the Qwen2.5-7B shape with `mask_token_id`
  151666, model_type "Dream" (the Dream configs quoted by dLLM tooling on GitHub); 151,667
  tokens (Qwen2.5's 151,665 plus `<|beginoftext|>` 151665 and `<|mask|>` 151666) for 152,064
  rows; `<|endoftext|>` 151643 = eos = pad, `<|im_end|>` 151645. Qwen2.5's 22 added tokens
  (QWEN25_ADDED) at their ids, FIM tokens included.
- Dream-Coder-v0-Instruct-7B (Dream-org, adapted from Qwen2.5-Coder-7B): Dream's architecture,
  tokenizer and special ids; its config.json was not found in a stored copy, so the fixture
  takes Dream-v0's (same 7B Qwen2.5 shape) and Dream's ChatML template (*assumption*).
- DiffuCoder-7B-Instruct (apple, adapted from Qwen2.5-Coder-7B): model_type "Dream",
  `DreamModel`, mask 151666; its answers are padded with `<|dlm_pad|>` 151667 (the published
  demos cut at it: apple/ml-diffucoder `inference_demo.py`; issue 52), so 151,668 tokens; eos
  151643 in config and generation_config (the issue: "it stops only at 151643"); the tokenizer's
  pad_token is `<|dlm_pad|>` (*assumption*: the published tokenizer_config.json is not stored);
  the chat template is the ChatML of the demo's prompt (`You are a helpful assistant.`).
- LLaDA-1.5 (GSAI-ML, LLaDA-8B-Instruct after VRPO): LLaDA-8B-Instruct's config, tokenizer and
  chat template (the same architecture file and tokenizer files).
"""

from __future__ import annotations

from typing import Any

LLADA2_MINI: dict[str, Any] = {
    "architectures": ["LLaDA2MoeModelLM"], "dtype": "bfloat16", "first_k_dense_replace": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5120,
    "max_position_embeddings": 32768, "model_type": "llada2_moe", "moe_intermediate_size": 512,
    "moe_router_enable_expert_bias": True, "n_group": 8, "norm_head": False, "norm_topk_prob": True,
    "num_attention_heads": 16, "num_experts": 256, "num_experts_per_tok": 8, "num_hidden_layers": 20,
    "num_key_value_heads": 4, "num_shared_experts": 1, "output_router_logits": False, "pad_token_id": 156892,
    "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-06, "rope_theta": 600000, "routed_scaling_factor": 2.5,
    "score_function": "sigmoid", "tie_word_embeddings": False, "topk_group": 4, "use_qk_norm": True,
    "use_qkv_bias": False, "vocab_size": 157184,
}

LLADA_8B: dict[str, Any] = {
    "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
    "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
                 "AutoModel": "modeling_llada.LLaDAModelLM"},
    "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "d_model": 4096,
    "embedding_dropout": 0.0, "embedding_size": 126464, "eos_token_id": 126081, "flash_attention": False,
    "include_bias": False, "include_qkv_bias": False, "init_cutoff_factor": None, "init_device": "meta",
    "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False, "layer_norm_type": "rms",
    "layer_norm_with_affine": True, "mask_token_id": 126336, "max_sequence_length": 4096, "mlp_hidden_size": 12288,
    "mlp_ratio": 4, "model_type": "llada", "multi_query_attention": None, "n_heads": 32, "n_kv_heads": 32,
    "n_layers": 32, "pad_token_id": 126081, "precision": "amp_bf16", "residual_dropout": 0.0, "rms_norm_eps": 1e-05,
    "rope": True, "rope_full_precision": True, "rope_theta": 500000.0, "scale_logits": False,
    "transformers_version": "4.46.3", "use_cache": False, "vocab_size": 126464, "weight_tying": False,
}

DREAM_7B: dict[str, Any] = {
    "architectures": ["DreamModel"], "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "mask_token_id": 151666, "max_position_embeddings": 131072,
    "max_window_layers": 28, "model_type": "Dream", "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "pad_token_id": 151643, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.46.2", "use_cache": True, "use_sliding_window": False, "vocab_size": 152064,
}

# the keys a fixture may change: depth and width, nothing else
DEPTH_WIDTH: dict[str, tuple[str, ...]] = {
    "llada2": ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
               "head_dim", "moe_intermediate_size", "num_experts"),
    "llada": ("n_layers", "d_model", "n_heads", "n_kv_heads", "mlp_hidden_size"),
    "dream": ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "max_window_layers"),
    "llada_moe": ("num_hidden_layers", "hidden_size", "dense_intermediate_size", "expert_intermediate_size",
                  "num_attention_heads", "num_key_value_heads", "num_experts", "moe_layer_freq"),
}

# The structure of the chat_template of inclusionAI/LLaDA2.0-mini / LLaDA2.1 (tokenizer_config.json),
# without its tool and reasoning branches: a SYSTEM turn ending "detailed thinking off<|role_end|>",
# then <role>HUMAN</role>...<|role_end|>, and <role>ASSISTANT</role> as the generation prompt.
LLADA2_CHAT_TEMPLATE = (
    "{% set thinking_option = 'off' %}"
    "{{- '<role>SYSTEM</role>' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n' }}{%- endif %}"
    "{{- 'detailed thinking ' + thinking_option + '<|role_end|>' }}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}{{- '<role>HUMAN</role>' + message.content + '<|role_end|>' }}"
    "{%- elif message.role == 'system' and not loop.first %}"
    "{{- '<role>SYSTEM</role>' + message.content + '<|role_end|>' }}"
    "{%- elif message.role == 'assistant' %}{{- '<role>ASSISTANT</role>' + message.content + '<|role_end|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<role>ASSISTANT</role>' }}{%- endif %}"
)
# GSAI-ML/LLaDA-8B-Instruct tokenizer_config.json `chat_template`, verbatim (yinj66/support_basis copy)
LLADA_8B_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
)
# Qwen2's ChatML template with its default system message (what Dream's demos print)
DREAM_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Qwen2.5's 22 added tokens (tokenizer_config.json `added_tokens_decoder` of every Qwen2.5 and
# Qwen2.5-Coder checkpoint): id -> (text, special). The FIM, repo and tool-call tokens are added
# as not special. Every model built on Qwen2.5's tokenizer (Dream, Dream-Coder, DiffuCoder)
# carries them all, whether or not it was trained with them.
QWEN25_ADDED: dict[int, tuple[str, bool]] = {
    151643: ("<|endoftext|>", True), 151644: ("<|im_start|>", True), 151645: ("<|im_end|>", True),
    151646: ("<|object_ref_start|>", True), 151647: ("<|object_ref_end|>", True), 151648: ("<|box_start|>", True),
    151649: ("<|box_end|>", True), 151650: ("<|quad_start|>", True), 151651: ("<|quad_end|>", True),
    151652: ("<|vision_start|>", True), 151653: ("<|vision_end|>", True), 151654: ("<|vision_pad|>", True),
    151655: ("<|image_pad|>", True), 151656: ("<|video_pad|>", True), 151657: ("<tool_call>", False),
    151658: ("</tool_call>", False), 151659: ("<|fim_prefix|>", False), 151660: ("<|fim_middle|>", False),
    151661: ("<|fim_suffix|>", False), 151662: ("<|fim_pad|>", False), 151663: ("<|repo_name|>", False),
    151664: ("<|file_sep|>", False),
}
# Dream (Dream-v0-*-7B, Dream-Coder-v0-*-7B) adds two: <|beginoftext|> (its bos_token) and <|mask|>
DREAM_ADDED: dict[int, tuple[str, bool]] = QWEN25_ADDED | {151665: ("<|beginoftext|>", True), 151666: ("<|mask|>", True)}
# DiffuCoder (apple/DiffuCoder-7B-*, Dream's architecture and tokenizer code) adds <|dlm_pad|>,
# the token its answers are padded with (its demos cut the answer at the first one)
DIFFUCODER_ADDED: dict[int, tuple[str, bool]] = DREAM_ADDED | {151667: ("<|dlm_pad|>", True)}

# LLaDA2.2-mini: LLaDA2's architecture, tokenizer and template with block routing and the in/del
# edit tokens (docs/models.md, "LLaDA2.2", each value's source): expert capacity 48 per 32-token
# block, rope theta 3e6 and 131072 positions (flash's; mini's are not stored), DELETE 156930 and
# INSERT (`split_token_id`) 156931 (their token strings are an assumption)
LLADA22_MINI: dict[str, Any] = LLADA2_MINI | {
    "expert_capacity": 48, "block_size": 32, "delete_token_id": 156930, "split_token_id": 156931,
    "rope_theta": 3000000.0, "max_position_embeddings": 131072,
}

# LLaDA-MoE-7B-A1B-Instruct (inclusionAI): the keys and defaults of its configuration class
# (`LLaDAMoEConfig`, as the dllm training library and a stored copy carry it) with the published
# model's values: 16 layers of width 2048, 16 heads of 128 (no GQA), 64 experts of 1024 with 8
# per token and no shared expert, qk norm, softmax routing, rope theta 50000, 8192 positions;
# LLaDA2's tokenizer (157,184 rows, <|mask|> 156895, <|endoftext|> 156892 = eos = pad) and its
# `<role>HUMAN</role>` chat template. `moe_layer_freq`: every layer an MoE (the class's default).
LLADA_MOE_7B: dict[str, Any] = {
    "architectures": ["LLaDAMoEModelLM"], "model_type": "lladamoe", "attention_bias": False,
    "attention_dropout": 0.0, "clip_qkv": None, "dense_intermediate_size": 8192, "expert_intermediate_size": 1024,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "max_position_embeddings": 8192,
    "moe_layer_freq": [1] * 16, "moe_router_enable_expert_bias": False, "moe_router_score_function": "softmax",
    "norm_topk_prob": None, "num_attention_heads": 16, "num_experts": 64, "num_experts_per_tok": 8,
    "num_hidden_layers": 16, "num_key_value_heads": 16, "output_router_logits": False, "partial_rotary_factor": 1.0,
    "qk_layernorm": True, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 50000.0,
    "routed_scaling_factor": 1, "router_aux_loss_coef": 0.01, "router_num_group": None, "router_topk_group": None,
    "shared_expert_intermediate_size": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "use_cache": False, "vocab_size": 157184, "eos_token_id": 156892, "pad_token_id": 156892,
    "mask_token_id": 156895,
}
