"""Topology files shipped with tensorkiln (package data): resnet18.csv."""
