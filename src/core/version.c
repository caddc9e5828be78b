/*
 * version.c - the library's version strings. INFD_GIT_REV is set for this one
 * file by CMake at configure time, so a new commit does not rebuild the rest.
 */
#include "infd/infd.h"

#ifndef INFD_GIT_REV
#define INFD_GIT_REV "unknown"
#endif

#define STR2_(x) #x
#define STR_(x)  STR2_(x)

const char *infd_version(void)
{
    return STR_(INFD_VERSION_MAJOR) "." STR_(INFD_VERSION_MINOR) "." STR_(INFD_VERSION_PATCH);
}

const char *infd_version_git(void)
{
    return INFD_GIT_REV;
}
