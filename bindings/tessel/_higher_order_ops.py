"""torch._higher_order_ops: the higher-order operators torchtitan's selective-checkpointing save list names
(flex_attention, inductor_compiled_code). Each is a named, hashable handle; tessel runs eagerly and has no
higher-order operators, so a policy never sees one and calling one is not supported."""


class HigherOrderOperator:
    def __init__(self, name):
        self._name = self.__name__ = name

    def name(self):
        return self._name

    def __str__(self):
        return self._name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("tessel._higher_order_ops.%s is a handle for selective checkpointing save lists; "
                                  "tessel has no higher-order operators" % self._name)


flex_attention = HigherOrderOperator("flex_attention")
inductor_compiled_code = HigherOrderOperator("inductor_compiled_code")
