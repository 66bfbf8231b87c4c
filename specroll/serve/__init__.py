"""`specroll serve`: one specroll engine behind vLLM's HTTP protocol (OpenAI completions and chat,
SkyRL's and SGLang's generate, vLLM's RL control endpoints), so RL frameworks and OpenAI clients run
on it unchanged. FastAPI is imported only here, never by the engine."""
