"""Runnable examples shipped with the package (``python -m casaas.examples.NAME``).

- :mod:`casaas.examples.iceberg_appends`: concurrent PyIceberg appends to one
  table through the casaas Iceberg catalog, optionally behind a proxy that
  drops the answers of a share of pointer writes after they land.
"""
