// Imported first: the SDK reads this when it loads, and the warning would bury the figures.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
