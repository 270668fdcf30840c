"""Greedy token ids from an independent engine (llama.cpp through llama-cpp-python), to pin in
tests/app/test_smollm2.py. Not run by the tests: it needs llama-cpp-python, which compiles
llama.cpp (about ten minutes on 2 cores), so it lives in a throwaway venv:

    python3 -m venv /tmp/llamacpp && /tmp/llamacpp/bin/pip install llama-cpp-python==0.3.36
    /tmp/llamacpp/bin/python tests/app/tools/pin_llama_cpp_ids.py models/SmolLM2-135M-Instruct.Q4_1.gguf

For each prompt it prints the prompt ids (llama.cpp's tokenizer, special tokens parsed, no BOS:
the GGUF sets add_bos_token false; the full-trace case keeps its first 64) and the greedy
continuation (top_k 1, temperature 0, no repeat penalty) computed on the CPU with an f32 KV
cache, as JSON to paste into PINNED.
"""
import argparse
import json

import llama_cpp

# (prompt text, prompt tokens kept (None: all), tokens to generate)
CASES = [
    ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", None, 16),
    ("<|im_start|>user\nWrite one sentence about the sea.<|im_end|>\n<|im_start|>assistant\n", None, 16),
    # The full-trace case: the first 64 tokens of this text, then 64 generated.
    ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
     "<|im_start|>user\nExplain in a few sentences why the sky is blue during the day and red at sunset, "
     "for a curious ten year old who likes science, reads many books and asks a lot of questions.<|im_end|>\n<|im_start|>assistant\n",
     64, 64),
]
GGML_TYPE_F32 = 0


def greedy(llm, prompt_ids, n_predict):
    out = []
    for token in llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                              reset=True):
        out.append(int(token))
        if len(out) == n_predict:
            break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    args = ap.parse_args()
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=512, n_batch=512, n_threads=2, n_gpu_layers=0,
                          type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False, seed=0, verbose=False)
    print(f"# llama-cpp-python {llama_cpp.__version__}, model {args.model}, greedy")
    cases = []
    for text, keep, n_predict in CASES:
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)[:keep]
        generated = greedy(llm, ids, n_predict)
        cases.append({"prompt": text, "prompt_ids": ids, "generated_ids": generated,
                      "text": llm.detokenize(generated).decode(errors="replace")})
    print(json.dumps(cases, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
