"""PostgreSQL storage: schema migrations, inventory, and the COPY-based sample writer."""
