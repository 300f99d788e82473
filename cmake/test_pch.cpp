// Carries cmake/test_pch.h, which the unit tests reuse.
