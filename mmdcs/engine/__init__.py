"""Runner-side code: hooks, loops and optimizer constructors that move state between the
mmengine runner and the method's modules."""
