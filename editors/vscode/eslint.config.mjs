// ESLint flat config: the recommended and type-aware rules of typescript-eslint.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["out/**", "node_modules/**", "*.vsix"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        { allowForKnownSafeCalls: [{ from: "package", name: ["describe", "it"], package: "node:test" }] },
      ],
      "@typescript-eslint/explicit-function-return-type": ["error", { allowExpressions: true }],
      eqeqeq: "error",
    },
  },
  { files: ["eslint.config.mjs"], ...tseslint.configs.disableTypeChecked },
);
