"""From graph to loop IR: kernel grouping (fusion), lowering, reduction loops, kernel templates,
the target description and memory planning."""
