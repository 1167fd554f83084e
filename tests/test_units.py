def test_a_speedup_and_its_interval_print_one_way() -> None:
    from mpsup.units import fmt_interval, fmt_speedup

    assert fmt_interval(0.97, 0.95, 0.99) == "0.970x (95% CI 0.950-0.990x)"
    assert fmt_interval(1.2345, 1.1, 1.3, digits=2) == "1.23x (95% CI 1.10-1.30x)"
    assert fmt_interval(0.97, None, 0.99) == "0.970x"  # no interval: the estimate alone
    assert fmt_speedup(float("nan")) == "n/a" and fmt_speedup(None) == "n/a" and fmt_speedup(True) == "n/a"
