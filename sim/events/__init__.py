"""Argo Events, simulated: webhook event sources and the sensors they fire."""
