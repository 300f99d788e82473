// Carries cmake/pch.h, which the other targets reuse.
