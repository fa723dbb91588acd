"""Shipped model code: the flat folder whose files `save_pretrained` copies next to the weights."""
