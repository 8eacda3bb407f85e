"""Figures: one style (style.py) and one module per family of figures.

Figure code reads tables (DataFrames from the Parquet outputs), never a model.
"""
