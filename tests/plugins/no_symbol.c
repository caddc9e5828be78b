/*
 * no_symbol.c - a shared library without infd_plugin_kind(), for the e2e
 * test of a plugin that cannot be used: the model fails to load with a
 * message naming the missing function, and the server keeps serving.
 */
int infd_test_not_a_plugin(void);

int infd_test_not_a_plugin(void)
{
    return 42;
}
