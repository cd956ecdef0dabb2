"""Networks in: an ONNX model read into operators on static shapes (``import_onnx``), fused
into groups as TVM's FuseOps does, each group a workload of the ``.tensor`` language
(``plan``): the tasks a network's tuning spends its trials on."""
from metasched.graph.model import Graph, Node
from metasched.graph.onnx_import import import_onnx, load_model
from metasched.graph.tasks import Call, Plan, Task, View, plan

__all__ = ["Call", "Graph", "Node", "Plan", "Task", "View", "import_onnx", "load_model", "plan"]
