// The tests' precompiled header: the project's, and Catch2 (before Xlib, whose macros break it).
#pragma once

#include "cmake/pch.h"

#include <catch2/catch.hpp>
