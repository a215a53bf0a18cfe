"""Programs no one here wrote, run as clients of our inputs and outputs (llama.cpp's HF -> GGUF converter)."""
