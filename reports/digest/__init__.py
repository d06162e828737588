"""Scheduled digests: a weekly usage summary per account to chat, and emails to users whose jobs held GPUs idle."""
