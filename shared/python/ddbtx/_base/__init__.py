"""The base layer: requests as values and their drivers, items, request validation,
client-side conditions and the one door to DynamoDB. It imports nothing above it; the
public modules :mod:`ddbtx.errors`, :mod:`ddbtx.schema`, :mod:`ddbtx.tables` and
:mod:`ddbtx.guard` belong to this layer too."""
