"""The text grammars of metasched (lark), shipped as package data: tensor.lark is the workload
language, trace.lark the text form of a trace."""
