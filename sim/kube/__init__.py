"""A Kubernetes API emulator speaking the real REST protocol to kubernetes-asyncio."""
