"""Where variant sources come from: vLLM releases on the package index, files, git refs;
source text to classes (standard library only).
"""
