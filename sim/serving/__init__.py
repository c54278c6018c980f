"""A KServe (Serverless mode) + Knative Serving + Kourier stand-in over the Kubernetes API
emulator: InferenceServices become revisions that load their model from S3 and really answer
KServe's v1 protocol, behind one gateway routing by `Host` along the canary split.
docs/simulator.md describes it and the upstream code each part follows."""
