"""The world we cannot run here: a Kubernetes API emulator, an Argo simulator and a stand-in
cluster registry. Dev and test only; never shipped in an image."""
