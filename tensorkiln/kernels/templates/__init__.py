"""Loop-nest templates for contractions (matmul, conv2d)."""
