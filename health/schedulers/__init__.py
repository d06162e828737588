"""The schedulers gpuscope drains and resumes nodes through."""
