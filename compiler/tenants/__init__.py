"""Tenants: the namespace's objects and their drift, storage users and their policies, and the
service that provisions on first use and reconciles every tenant."""
